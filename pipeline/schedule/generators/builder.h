// Helpers shared by the schedule generators (not part of the public API).
#pragma once

#include <string>

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline::detail {

/// A schedule with no actions yet: `p` workers, `p * v` virtual stages (stage s on worker
/// s % p), `m` micro-batches. Throws std::invalid_argument naming the generator and the value
/// when p < 1, m < 1 or v < 1.
Schedule empty_schedule(const std::string& name, int p, int m, int v = 1);

/// Appends an action to `worker`'s list.
inline void emit(Schedule& s, int worker, int stage, ActionKind kind, int microbatch) {
  s.actions[worker].push_back(Action{stage, kind, microbatch});
}

}  // namespace pipewright::pipeline::detail
