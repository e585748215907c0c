// Recomputation (activation checkpointing) as a schedule transformation.
#pragma once

#include <functional>

#include "pipeline/schedule/checkpoint_mode.h"
#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// Which cells are checkpointed: is_checkpointed(stage, microbatch).
using CheckpointPredicate = std::function<bool(int stage, int microbatch)>;

/// torchgpipe's modes as a predicate, the same on every stage: micro-batch i of m is
/// checkpointed iff i < m (kAlways), i < m-1 (kExceptLast), never (kNever).
/// Throws std::invalid_argument if m < 1.
CheckpointPredicate checkpoint_predicate(Checkpoint mode, int m);

/// A copy of `schedule` with R(s,j) inserted immediately before the B (or I) of every cell
/// (s,j) for which is_checkpointed(s,j) holds. R depends only on F(s,j), so the worker
/// recomputes as soon as it reaches that point in its list, before the gradient from stage s+1
/// has necessarily arrived; the B/I then runs on a fresh tape. For GPipe, p = 2, m = 2, always:
///
///     worker 0  F0 F1 R1 B1 R0 B0        worker 1  F0 F1 R1 B1 R0 B0
///
/// Throws std::invalid_argument if the schedule already recomputes a cell the predicate picks.
/// The result is not validated here (validate() it, or replay_schedule() it, which validates).
Schedule with_recompute(const Schedule& schedule, const CheckpointPredicate& is_checkpointed);

}  // namespace pipewright::pipeline
