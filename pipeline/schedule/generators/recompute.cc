#include "pipeline/schedule/generators/recompute.h"

#include <set>
#include <stdexcept>
#include <string>
#include <utility>

namespace pipewright::pipeline {

CheckpointPredicate checkpoint_predicate(Checkpoint mode, int m) {
  if (m < 1) {
    throw std::invalid_argument("checkpoint_predicate: the number of micro-batches m must be >= 1 (got " +
                                std::to_string(m) + ")");
  }
  return [mode, m](int /*stage*/, int microbatch) { return is_checkpointed(mode, microbatch, m); };
}

Schedule with_recompute(const Schedule& schedule, const CheckpointPredicate& is_checkpointed) {
  std::set<std::pair<int, int>> already;  // cells that already have an R
  for (const auto& list : schedule.actions) {
    for (const Action& a : list) {
      if (a.kind == ActionKind::kRecompute) already.insert({a.stage, a.microbatch});
    }
  }
  Schedule out = schedule;
  for (auto& list : out.actions) {
    std::vector<Action> rewritten;
    rewritten.reserve(list.size() * 2);
    for (const Action& a : list) {
      const bool backward = a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardInput;
      if (backward && is_checkpointed(a.stage, a.microbatch)) {
        if (already.count({a.stage, a.microbatch})) {
          throw std::invalid_argument("with_recompute: schedule '" + schedule.name + "' already has " +
                                      Action{a.stage, ActionKind::kRecompute, a.microbatch}.str());
        }
        rewritten.push_back(Action{a.stage, ActionKind::kRecompute, a.microbatch});
      }
      rewritten.push_back(a);
    }
    list = std::move(rewritten);
  }
  return out;
}

}  // namespace pipewright::pipeline
