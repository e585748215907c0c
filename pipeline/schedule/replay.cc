#include "pipeline/schedule/replay.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "pipeline/schedule/deps.h"
#include "pipeline/schedule/validate.h"

namespace pipewright::pipeline {

double StageCosts::of(ActionKind kind) const {
  switch (kind) {
    case ActionKind::kForward: return forward;
    case ActionKind::kRecompute: return recompute;
    case ActionKind::kBackward: return backward;
    case ActionKind::kBackwardInput: return backward_input;
    case ActionKind::kBackwardWeight: return backward_weight;
  }
  return 0.0;
}

Costs Costs::unit(double forward, double backward) {
  Costs c;
  c.uniform = StageCosts{forward, backward, backward / 2, backward / 2, forward};
  return c;
}

Costs Costs::split(double forward, double backward_input, double backward_weight) {
  Costs c;
  c.uniform = StageCosts{forward, backward_input + backward_weight, backward_input,
                         backward_weight, forward};
  return c;
}

double Costs::of(const Action& a) const {
  return per_stage.empty() ? uniform.of(a.kind) : per_stage[a.stage].of(a.kind);
}

namespace {

void check_costs(const Schedule& schedule, const Costs& costs) {
  auto check = [](const StageCosts& c, const std::string& where) {
    for (ActionKind k : {ActionKind::kForward, ActionKind::kRecompute, ActionKind::kBackward,
                         ActionKind::kBackwardInput, ActionKind::kBackwardWeight}) {
      if (c.of(k) < 0) {
        throw std::invalid_argument("replay_schedule: cost of " +
                                    std::string(1, action_letter(k)) + where + " is negative (" +
                                    std::to_string(c.of(k)) + ")");
      }
    }
  };
  using Named = std::pair<const char*, double>;
  for (const auto& [name, value] : {Named{"comm_latency", costs.comm_latency},
                                     Named{"wake_latency", costs.wake_latency},
                                     Named{"wake_after", costs.wake_after}}) {
    if (value < 0) {
      throw std::invalid_argument(std::string("replay_schedule: ") + name + " is negative (" +
                                  std::to_string(value) + ")");
    }
  }
  if (costs.per_stage.empty()) {
    check(costs.uniform, "");
    return;
  }
  if (static_cast<int>(costs.per_stage.size()) != schedule.num_stages) {
    throw std::invalid_argument("replay_schedule: per_stage has " +
                                std::to_string(costs.per_stage.size()) +
                                " entries but the schedule has " +
                                std::to_string(schedule.num_stages) + " stages");
  }
  for (size_t s = 0; s < costs.per_stage.size(); ++s) {
    check(costs.per_stage[s], " on stage " + std::to_string(s));
  }
}

}  // namespace

MemoryPeaks peak_memory(const Schedule& schedule) {
  const ActionIndex index(schedule);
  MemoryPeaks peaks;
  peaks.stage_activations.assign(schedule.num_stages, 0);
  peaks.stage_checkpointed_inputs.assign(schedule.num_stages, 0);
  peaks.worker_activations.assign(schedule.num_workers, 0);
  peaks.worker_checkpointed_inputs.assign(schedule.num_workers, 0);
  std::vector<int> full(schedule.num_stages, 0);
  std::vector<int> inputs(schedule.num_stages, 0);

  for (int w = 0; w < schedule.num_workers; ++w) {
    int worker_full = 0;
    int worker_inputs = 0;
    for (const Action& a : schedule.actions[w]) {
      const int s = a.stage;
      const int j = a.microbatch;
      const bool checkpointed = index.count(s, ActionKind::kRecompute, j) > 0;
      if (a.kind == ActionKind::kForward) {
        int& counter = checkpointed ? inputs[s] : full[s];
        int& worker_counter = checkpointed ? worker_inputs : worker_full;
        ++counter;
        ++worker_counter;
      } else if (a.kind == ActionKind::kRecompute) {  // the stashed input becomes a full tape
        --inputs[s];
        --worker_inputs;
        ++full[s];
        ++worker_full;
      }
      peaks.stage_activations[s] = std::max(peaks.stage_activations[s], full[s]);
      peaks.stage_checkpointed_inputs[s] = std::max(peaks.stage_checkpointed_inputs[s], inputs[s]);
      peaks.worker_activations[w] = std::max(peaks.worker_activations[w], worker_full);
      peaks.worker_checkpointed_inputs[w] = std::max(peaks.worker_checkpointed_inputs[w], worker_inputs);
      // The last action of the cell's backward (B, or W when split) frees its activations.
      if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight) {
        --full[s];
        --worker_full;
      }
    }
  }
  return peaks;
}

namespace {

// The replay of Note [Workers sharing processors], as an event simulation: between two events
// (an action ending, a message's latency passing) the set of running workers is fixed, and so
// is their speed.
Replay replay_shared(const Schedule& schedule, const Costs& costs, int processors, int threads) {
  const int p = schedule.num_workers;
  const ActionIndex index(schedule);
  Replay r;
  r.start.resize(static_cast<size_t>(p));
  r.end.resize(static_cast<size_t>(p));
  for (int w = 0; w < p; ++w) {
    r.start[w].assign(schedule.actions[w].size(), -1.0);
    r.end[w].assign(schedule.actions[w].size(), -1.0);
  }
  std::vector<int> next(static_cast<size_t>(p), 0);
  std::vector<double> left(static_cast<size_t>(p), -1.0);  // work left of the running action
  std::vector<double> free_at(static_cast<size_t>(p), 0.0);
  double now = 0.0;
  constexpr double kNever = std::numeric_limits<double>::infinity();
  for (;;) {
    // Start every action that may start by now; note the earliest later start.
    double later = kNever;
    bool all_done = true;
    for (int w = 0; w < p; ++w) {
      const auto& list = schedule.actions[w];
      if (next[w] < static_cast<int>(list.size())) all_done = false;
      if (left[w] >= 0 || next[w] == static_cast<int>(list.size())) continue;
      const std::optional<double> ready =
          ready_at(index, schedule, r, w, list[next[w]], free_at[w], costs.comm_latency);
      if (!ready) continue;
      if (*ready > now) {
        later = std::min(later, *ready);
        continue;
      }
      r.start[w][next[w]] = now;
      left[w] = costs.of(list[next[w]]);
    }
    if (all_done) break;
    int running = 0;
    for (int w = 0; w < p; ++w) running += left[w] >= 0 ? 1 : 0;
    if (running == 0 && later == kNever) {
      throw std::invalid_argument("replay_on_shared_processors: the schedule deadlocks");
    }
    const double speed =
        std::min(1.0, static_cast<double>(processors) / (static_cast<double>(running) * threads));
    double step = later - now;
    for (int w = 0; w < p; ++w) {
      if (left[w] >= 0) step = std::min(step, left[w] / speed);
    }
    now += step;
    for (int w = 0; w < p; ++w) {
      if (left[w] < 0) continue;
      left[w] -= step * speed;
      if (left[w] > 1e-9 * std::max(1.0, costs.of(schedule.actions[w][next[w]]))) continue;
      r.end[w][next[w]] = now;
      free_at[w] = now;
      left[w] = -1.0;
      ++next[w];
    }
  }
  return r;
}

ScheduleReplay summarize(const Schedule& schedule, const Replay& r) {
  ScheduleReplay sim;
  const int p = schedule.num_workers;
  sim.timeline.resize(p);
  sim.busy.assign(p, 0.0);
  for (int w = 0; w < p; ++w) {
    const auto& list = schedule.actions[w];
    for (size_t i = 0; i < list.size(); ++i) {
      sim.timeline[w].push_back(TimedAction{list[i], r.start[w][i], r.end[w][i]});
      sim.busy[w] += r.end[w][i] - r.start[w][i];
      sim.makespan = std::max(sim.makespan, r.end[w][i]);
    }
  }
  sim.idle.resize(p);
  double total_idle = 0.0;
  for (int w = 0; w < p; ++w) {
    sim.idle[w] = sim.makespan - sim.busy[w];
    total_idle += sim.idle[w];
  }
  sim.bubble_fraction = sim.makespan > 0 ? total_idle / (p * sim.makespan) : 0.0;
  sim.memory = peak_memory(schedule);
  return sim;
}

}  // namespace

ScheduleReplay replay_schedule(const Schedule& schedule, const Costs& costs) {
  validate(schedule);
  check_costs(schedule, costs);
  return summarize(schedule, replay(schedule, [&](const Action& a) { return costs.of(a); },
                                    costs.comm_latency, {costs.wake_after, costs.wake_latency}));
}

ScheduleReplay replay_on_shared_processors(const Schedule& schedule, const Costs& costs,
                                           int processors, int threads) {
  if (processors < 1 || threads < 1) {
    throw std::invalid_argument("replay_on_shared_processors: processors " +
                                std::to_string(processors) + " and threads " +
                                std::to_string(threads) + " must be at least 1");
  }
  if (processors >= schedule.num_workers * threads) return replay_schedule(schedule, costs);
  validate(schedule);
  check_costs(schedule, costs);
  return summarize(schedule, replay_shared(schedule, costs, processors, threads));
}

}  // namespace pipewright::pipeline
