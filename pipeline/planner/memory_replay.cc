// replay_memory: Note [Replaying a device's memory] (memory_replay.h).
#include "pipeline/planner/memory_replay.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "pipeline/schedule/deps.h"

namespace pipewright::pipeline {
namespace {

// A message copied onto a worker's device by another worker.
struct Message {
  int64_t bytes = 0;
  ActionPosition sender;
  int consumer = 0;      // index of the receiving action in the worker's list
  double arrival = 0.0;  // the replayed end of the sender's action
};

// What one own action does, with its device's messages.
struct Effect {
  ActionBytes bytes;
  int64_t extra = 0;  // added to the delta: what a copy-free hand-off leaves (file comment)
};

std::optional<ActionPosition> backward_of(const ActionIndex& index, int stage, int j) {
  if (auto b = index.find(stage, ActionKind::kBackward, j)) return b;
  return index.find(stage, ActionKind::kBackwardInput, j);
}

// For each action, the highest index of each worker's list that happens before or at it in
// the schedule's dependency order (a vector clock), found by replaying the lists.
std::vector<std::vector<std::vector<int>>> vector_clocks(const Schedule& s,
                                                         const ActionIndex& index) {
  const int p = s.num_workers;
  std::vector<std::vector<std::vector<int>>> clock(static_cast<size_t>(p));
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  size_t remaining = 0;
  for (int w = 0; w < p; ++w) remaining += s.actions[static_cast<size_t>(w)].size();
  while (remaining > 0) {
    bool progressed = false;
    for (int w = 0; w < p; ++w) {
      const auto& list = s.actions[static_cast<size_t>(w)];
      auto& mine = clock[static_cast<size_t>(w)];
      while (next[static_cast<size_t>(w)] < list.size()) {
        const size_t k = next[static_cast<size_t>(w)];
        std::vector<int> vc = k > 0 ? mine[k - 1] : std::vector<int>(static_cast<size_t>(p), -1);
        bool ready = true;
        for (const Action& d : dependencies(index, s, list[k])) {
          const ActionPosition at = *index.find(d);
          if (at.worker == w) continue;  // earlier in this list
          const auto& theirs = clock[static_cast<size_t>(at.worker)];
          if (static_cast<size_t>(at.index) >= theirs.size()) {
            ready = false;
            break;
          }
          const std::vector<int>& dep = theirs[static_cast<size_t>(at.index)];
          for (int u = 0; u < p; ++u) {
            vc[static_cast<size_t>(u)] = std::max(vc[static_cast<size_t>(u)], dep[static_cast<size_t>(u)]);
          }
        }
        if (!ready) break;
        vc[static_cast<size_t>(w)] = static_cast<int>(k);
        mine.push_back(std::move(vc));
        ++next[static_cast<size_t>(w)];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) throw std::invalid_argument("replay_memory: the schedule deadlocks");
  }
  return clock;
}

}  // namespace

int64_t MemoryModel::static_bytes(const Schedule& schedule, int worker) const {
  int64_t bytes = 0;
  for (int s : schedule.stages_of(worker)) {
    const double params = static_cast<double>(full[static_cast<size_t>(s)].parameter_bytes);
    bytes += std::llround(params * (1.0 + optimizer_state_factor + (grads_before_step ? 1 : 0))) +
             full[static_cast<size_t>(s)].buffer_bytes;
  }
  return bytes;
}

std::vector<DevicePeak> replay_memory(const Schedule& s, const ScheduleReplay& sim,
                                      const MemoryModel& model, bool bounds) {
  const int S = s.num_stages, m = s.num_microbatches, p = s.num_workers;
  if (static_cast<int>(model.full.size()) != S || static_cast<int>(model.tail.size()) != S) {
    throw std::invalid_argument("replay_memory: the memory model has " +
                                std::to_string(model.full.size()) + " stages, the schedule " +
                                std::to_string(S));
  }
  const ActionIndex index(s);
  auto worker_of = [&](int stage) { return s.stage_worker[static_cast<size_t>(stage)]; };
  auto checkpointed = [&](int stage, int j) {
    return index.count(stage, ActionKind::kRecompute, j) > 0;
  };

  // Pass 1: every action's effect, and the messages each device receives.
  std::vector<std::vector<Effect>> effects(static_cast<size_t>(p));
  std::vector<std::vector<Message>> incoming(static_cast<size_t>(p));
  std::vector<char> forwarded(static_cast<size_t>(S), 0);
  std::vector<char> have_grads(static_cast<size_t>(S), model.grads_before_step ? 1 : 0);
  std::vector<char> have_input_grads = have_grads;  // of what I computes (B's parameters)
  for (int w = 0; w < p; ++w) effects[static_cast<size_t>(w)].resize(s.actions[static_cast<size_t>(w)].size());
  auto effect_at = [&](ActionPosition at) -> Effect& {
    return effects[static_cast<size_t>(at.worker)][static_cast<size_t>(at.index)];
  };
  auto receive = [&](int w, int k, int64_t bytes, ActionPosition sender) {
    const double arrival = sim.timeline[static_cast<size_t>(sender.worker)]
                                       [static_cast<size_t>(sender.index)].end;
    incoming[static_cast<size_t>(w)].push_back({bytes, sender, k, arrival});
  };
  for (int w = 0; w < p; ++w) {
    const auto& list = s.actions[static_cast<size_t>(w)];
    for (size_t k = 0; k < list.size(); ++k) {
      const Action& a = list[k];
      const int st = a.stage, j = a.microbatch;
      const StageMemory& mem = model.of(st, j, m);
      Effect& e = effects[static_cast<size_t>(w)][k];
      const size_t si = static_cast<size_t>(st);
      switch (a.kind) {
        case ActionKind::kForward: {
          const bool first = !forwarded[si];
          forwarded[si] = 1;
          e.bytes = checkpointed(st, j) ? (first ? mem.checkpoint_first : mem.checkpoint)
                                        : (first ? mem.forward_first : mem.forward);
          if (st == 0) break;
          const ActionPosition sender = *index.find(st - 1, ActionKind::kForward, j);
          if (worker_of(st - 1) != w) {
            receive(w, static_cast<int>(k), mem.input_bytes, sender);
            break;
          }
          // One worker: what is handed over without a copy stays with the sender's output.
          int64_t shared = mem.input_bytes;
          if (model.copied_handoffs) {  // the message is a copy, its portals are not
            receive(w, static_cast<int>(k), mem.input_bytes - mem.input_portal_bytes, sender);
            shared = mem.input_portal_bytes;
          }
          if (checkpointed(st - 1, j)) {
            effect_at(sender).extra += shared;
          } else if (auto b = backward_of(index, st, j)) {
            effect_at(*b).extra += shared;
          }
          break;
        }
        case ActionKind::kRecompute:
          e.bytes = mem.recompute;
          break;
        case ActionKind::kBackward:
        case ActionKind::kBackwardInput: {
          if (a.kind == ActionKind::kBackward) {
            e.bytes = have_grads[si] ? mem.backward : mem.backward_first;
            have_grads[si] = 1;
          } else {
            e.bytes = have_input_grads[si] ? mem.backward_input : mem.backward_input_first;
            have_input_grads[si] = 1;
          }
          if (st == S - 1) break;
          const ActionPosition sender = *backward_of(index, st + 1, j);
          if (worker_of(st + 1) != w) {
            receive(w, static_cast<int>(k), mem.grad_output_bytes, sender);
          } else if (model.copied_handoffs) {  // as in F: the portals' gradients are shared
            receive(w, static_cast<int>(k), mem.grad_output_bytes - mem.grad_output_portal_bytes,
                    sender);
            effect_at(sender).extra += mem.grad_output_portal_bytes;
          } else {
            effect_at(sender).extra += model.of(st + 1, j, m).grad_input_bytes;
          }
          break;
        }
        case ActionKind::kBackwardWeight:
          e.bytes = have_grads[si] ? mem.weight : mem.weight_first;
          have_grads[si] = 1;
          break;
      }
    }
  }

  std::vector<std::vector<std::vector<int>>> clock;
  if (bounds) clock = vector_clocks(s, index);

  // Pass 2: each device's level at each of its own actions.
  std::vector<DevicePeak> peaks(static_cast<size_t>(p));
  for (int w = 0; w < p; ++w) {
    const auto& list = s.actions[static_cast<size_t>(w)];
    int64_t held = model.static_bytes(s, w);
    if (worker_of(S - 1) == w) {
      for (int j = 0; j < m; ++j) held += model.of(S - 1, j, m).target_bytes;
    }
    std::vector<Message> messages = incoming[static_cast<size_t>(w)];
    std::sort(messages.begin(), messages.end(),
              [](const Message& a, const Message& b) { return a.arrival < b.arrival; });
    std::vector<std::vector<size_t>> consumed_by(list.size());
    for (size_t i = 0; i < messages.size(); ++i) {
      consumed_by[static_cast<size_t>(messages[i].consumer)].push_back(i);
    }
    std::vector<char> counted(messages.size(), 0), consumed(messages.size(), 0);
    size_t next_arrival = 0;
    int64_t arrived = 0;  // bytes of messages arrived (replayed order) and not yet consumed
    DevicePeak& peak = peaks[static_cast<size_t>(w)];
    peak.predicted = peak.low = peak.high = held;
    for (size_t k = 0; k < list.size(); ++k) {
      const double start = sim.timeline[static_cast<size_t>(w)][k].start;
      while (next_arrival < messages.size() && messages[next_arrival].arrival <= start) {
        if (!consumed[next_arrival]) {
          arrived += messages[next_arrival].bytes;
          counted[next_arrival] = 1;
        }
        ++next_arrival;
      }
      int64_t now = 0;  // the messages this action consumes: there in every count
      for (size_t i : consumed_by[k]) {
        now += messages[i].bytes;
        if (counted[i]) arrived -= messages[i].bytes;
        consumed[i] = 1;
      }
      const Effect& e = effects[static_cast<size_t>(w)][k];
      const int64_t level = held + now + e.bytes.peak;
      if (level + arrived > peak.predicted) {
        peak.predicted = level + arrived;
        peak.at = static_cast<int>(k);
      }
      if (bounds) {
        int64_t low = 0, high = 0;
        const std::vector<int>& at_k = clock[static_cast<size_t>(w)][k];
        for (size_t i = 0; i < messages.size(); ++i) {
          if (consumed[i]) continue;
          const ActionPosition sender = messages[i].sender;
          // The sender happens before this action: the message is there. This action
          // happens before the sender: it cannot be. (A sender of this worker's own, a copied
          // hand-off, happens before only when it comes earlier in the list: at_k[w] is k.)
          const bool before = sender.worker == w
                                  ? sender.index < static_cast<int>(k)
                                  : at_k[static_cast<size_t>(sender.worker)] >= sender.index;
          if (before) low += messages[i].bytes;
          const std::vector<int>& at_sender =
              clock[static_cast<size_t>(sender.worker)][static_cast<size_t>(sender.index)];
          if (at_sender[static_cast<size_t>(w)] < static_cast<int>(k)) high += messages[i].bytes;
        }
        peak.low = std::max(peak.low, level + low);
        if (level + high > peak.high) {
          peak.high = level + high;
          peak.at_high = static_cast<int>(k);
        }
      }
      held += now + e.bytes.delta + e.extra;
    }
    if (!bounds) {
      peak.low = peak.high = peak.predicted;
      peak.at_high = peak.at;
    }
  }
  return peaks;
}

}  // namespace pipewright::pipeline
