#include "pipeline/schedule/deps.h"

#include <algorithm>

namespace pipewright::pipeline {

namespace {
constexpr int kNumKinds = 5;
}  // namespace

ActionIndex::ActionIndex(const Schedule& schedule)
    : num_stages_(std::max(schedule.num_stages, 0)),
      num_microbatches_(std::max(schedule.num_microbatches, 0)) {
  const size_t n = static_cast<size_t>(num_stages_) * kNumKinds * num_microbatches_;
  first_.assign(n, ActionPosition{});
  count_.assign(n, 0);
  for (int w = 0; w < static_cast<int>(schedule.actions.size()); ++w) {
    const auto& list = schedule.actions[w];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const int k = slot(list[i].stage, list[i].kind, list[i].microbatch);
      if (k < 0) continue;
      if (count_[k]++ == 0) first_[k] = ActionPosition{w, i};
    }
  }
}

int ActionIndex::slot(int stage, ActionKind kind, int microbatch) const {
  const int kind_index = static_cast<int>(kind);
  if (stage < 0 || stage >= num_stages_ || microbatch < 0 || microbatch >= num_microbatches_ ||
      kind_index < 0 || kind_index >= kNumKinds) {
    return -1;
  }
  return (stage * kNumKinds + kind_index) * num_microbatches_ + microbatch;
}

std::optional<ActionPosition> ActionIndex::find(int stage, ActionKind kind, int microbatch) const {
  const int k = slot(stage, kind, microbatch);
  if (k < 0 || count_[k] == 0) return std::nullopt;
  return first_[k];
}

int ActionIndex::count(int stage, ActionKind kind, int microbatch) const {
  const int k = slot(stage, kind, microbatch);
  return k < 0 ? 0 : count_[k];
}

std::vector<Action> dependencies(const ActionIndex& index, const Schedule& schedule,
                                 const Action& a) {
  std::vector<Action> deps;
  auto add_if_present = [&](int stage, ActionKind kind) {
    if (index.find(stage, kind, a.microbatch)) deps.push_back(Action{stage, kind, a.microbatch});
  };
  switch (a.kind) {
    case ActionKind::kForward:
      if (a.stage > 0) add_if_present(a.stage - 1, ActionKind::kForward);
      for (const SkipEdge& e : schedule.skips) {
        if (e.to == a.stage) add_if_present(e.from, ActionKind::kForward);
      }
      break;
    case ActionKind::kRecompute:
      add_if_present(a.stage, ActionKind::kForward);
      break;
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput:
      add_if_present(a.stage, ActionKind::kForward);
      add_if_present(a.stage, ActionKind::kRecompute);
      if (a.stage + 1 < schedule.num_stages) {
        // The gradient comes from the next stage's B, or its I when that stage splits.
        add_if_present(a.stage + 1, ActionKind::kBackward);
        add_if_present(a.stage + 1, ActionKind::kBackwardInput);
      }
      for (const SkipEdge& e : schedule.skips) {
        if (e.from != a.stage) continue;
        add_if_present(e.to, ActionKind::kBackward);
        add_if_present(e.to, ActionKind::kBackwardInput);
      }
      break;
    case ActionKind::kBackwardWeight:
      add_if_present(a.stage, ActionKind::kBackwardInput);
      break;
  }
  return deps;
}

std::optional<double> ready_at(const ActionIndex& index, const Schedule& schedule,
                               const Replay& r, int worker, const Action& a, double free_at,
                               double latency) {
  double ready = free_at;
  for (const Action& d : dependencies(index, schedule, a)) {
    const ActionPosition pos = *index.find(d);
    const double done = r.end[pos.worker][pos.index];
    if (done < 0) return std::nullopt;
    ready = std::max(ready, done + (pos.worker == worker ? 0.0 : latency));
  }
  return ready;
}

Replay replay(const Schedule& schedule, const std::function<double(const Action&)>& cost,
              double latency, WakeCost wake) {
  const int p = static_cast<int>(schedule.actions.size());
  const ActionIndex index(schedule);
  Replay r;
  r.start.resize(p);
  r.end.resize(p);
  for (int w = 0; w < p; ++w) {
    r.start[w].assign(schedule.actions[w].size(), -1.0);
    r.end[w].assign(schedule.actions[w].size(), -1.0);
  }
  std::vector<int> next(p, 0);
  std::vector<double> free_at(p, 0.0);

  // Each pass runs every action whose dependencies have ended. An action's times depend only
  // on its dependencies and its worker's previous action, never on the pass order.
  bool progress = true;
  while (progress) {
    progress = false;
    for (int w = 0; w < p; ++w) {
      const auto& list = schedule.actions[w];
      while (next[w] < static_cast<int>(list.size())) {
        const Action& a = list[next[w]];
        std::optional<double> ready = ready_at(index, schedule, r, w, a, free_at[w], latency);
        if (!ready) break;
        if (wake.latency > 0 && *ready - free_at[w] > wake.after) *ready += wake.latency;
        r.start[w][next[w]] = *ready;
        r.end[w][next[w]] = *ready + cost(a);
        free_at[w] = r.end[w][next[w]];
        ++next[w];
        progress = true;
      }
    }
  }

  for (int w = 0; w < p; ++w) {
    const auto& list = schedule.actions[w];
    if (next[w] == static_cast<int>(list.size())) continue;
    const Action& a = list[next[w]];
    for (const Action& d : dependencies(index, schedule, a)) {
      const ActionPosition pos = *index.find(d);
      if (r.end[pos.worker][pos.index] < 0) {
        r.stuck.push_back(Replay::Wait{w, a, d});
        break;
      }
    }
  }
  return r;
}

}  // namespace pipewright::pipeline
