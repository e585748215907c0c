// validate: proves, before anything runs, that a schedule is complete and cannot deadlock.
#pragma once

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// Checks `schedule` and throws std::invalid_argument describing every problem found.
///
/// Shape: num_workers, num_stages, num_microbatches >= 1; actions has num_workers lists;
/// stage_worker has num_stages entries, each a valid worker, and every worker owns a stage.
///
/// Completeness, for every cell (stage s, micro-batch j):
///   - exactly one F(s,j);
///   - either exactly one B(s,j), or exactly one I(s,j) and one W(s,j) (never both forms);
///   - at most one R(s,j), and only before the cell's B/I in its worker's list;
///   - every action sits in the list of the worker that owns its stage; no other actions
///     (stage or micro-batch out of range).
///
/// Deadlock freedom: replays the schedule with the dependency rules of schedule.h (each worker
/// in order, blocking until the inputs of its next action exist; see deps.h). If the
/// replay gets stuck the message names each stuck worker, the action it waits at and the one it
/// waits for:
///
///   deadlock: worker 0 waits at B1@0 for B1@1; worker 1 waits at F2@1 for F2@0
///
/// A schedule that passes runs to the end on the runtime, whatever the actions cost.
void validate(const Schedule& schedule);

}  // namespace pipewright::pipeline
