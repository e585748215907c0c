// The dependency rules of schedule.h, as code. The validator (deadlock check) and the
// replay (timing) both walk a schedule with them:
//
//   F(s, j)      after F(s-1, j)                        activation from the left
//   R(s, j)      after F(s, j)
//   B/I(s, j)    after F(s, j), R(s, j) if present,     gradient from the right
//                and B/I(s+1, j)
//   W(s, j)      after I(s, j)
//   F(b, j)      after F(a, j); B/I(a, j) after B/I(b, j)   for each skip edge a -> b
//
// Replay: every worker runs its list in order; an action starts when its worker has finished
// the previous action AND all its dependencies have ended (plus a communication latency when
// a dependency ran on another worker). Sends never block, receives do: this is exactly what
// the runtime's channels do, so a schedule that replays to the end cannot hang the runtime.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// Where an action sits in a schedule: actions[worker][index].
struct ActionPosition {
  int worker = -1;
  int index = -1;
};

/// Finds actions by (stage, kind, micro-batch). Actions whose stage or micro-batch is out of
/// range are not indexed; when an action appears twice, the first occurrence wins (the
/// validator reports duplicates before it relies on this index).
class ActionIndex {
 public:
  explicit ActionIndex(const Schedule& schedule);
  std::optional<ActionPosition> find(int stage, ActionKind kind, int microbatch) const;
  std::optional<ActionPosition> find(const Action& a) const {
    return find(a.stage, a.kind, a.microbatch);
  }
  /// How many times the action appears (0 when out of range).
  int count(int stage, ActionKind kind, int microbatch) const;

 private:
  int slot(int stage, ActionKind kind, int microbatch) const;
  int num_stages_ = 0;
  int num_microbatches_ = 0;
  std::vector<ActionPosition> first_;
  std::vector<int> count_;
};

/// The actions of `schedule` that must end before `a` may start (only those present).
std::vector<Action> dependencies(const ActionIndex& index, const Schedule& schedule,
                                 const Action& a);

/// Result of a replay. Times are indexed like schedule.actions; actions that never ran (after a
/// deadlock) have start = end = -1.
struct Replay {
  struct Wait {
    int worker;
    Action at;         // the first action the worker could not start
    Action waits_for;  // a dependency of `at` that never ran
  };
  std::vector<std::vector<double>> start;
  std::vector<std::vector<double>> end;
  std::vector<Wait> stuck;  // empty iff every action ran
};

/// When action `a`, next on worker `worker` (free from `free_at` on), may start in replay `r`:
/// after its worker's previous action and every dependency's end, plus `latency` for one on
/// another worker. nullopt while a dependency has not ended (end < 0).
std::optional<double> ready_at(const ActionIndex& index, const Schedule& schedule,
                               const Replay& r, int worker, const Action& a, double free_at,
                               double latency);

/// A worker idle longer than `after` before its next action may start starts it `latency`
/// later (Costs::wake_latency, replay.h).
struct WakeCost {
  double after = 0.0;
  double latency = 0.0;
};

/// Replays `schedule` (see the top of this file). `cost(action)` is the duration of an action;
/// `latency` is added to every dependency that crosses workers, `wake` to the start of an
/// action its worker waited for longer than wake.after. Requires a schedule whose actions are
/// in range and unique (validate()'s structural checks).
Replay replay(const Schedule& schedule, const std::function<double(const Action&)>& cost,
              double latency = 0.0, WakeCost wake = {});

}  // namespace pipewright::pipeline
