// CSV form of a schedule: one row per action, so schedules can be saved, diffed, edited by
// hand (or produced by another tool) and loaded back.
//
//   # schedule name=1f1b workers=2 stages=2 microbatches=2 stage_worker=0,1
//   worker,index,stage,kind,microbatch
//   0,0,0,F,0
//   0,1,0,F,1
//   0,2,0,B,0
//   0,3,0,B,1
//   1,0,1,F,0
//   1,1,1,B,0
//   1,2,1,F,1
//   1,3,1,B,1
//
// `index` is the action's position in its worker's list; `kind` is F, R, B, I or W. The first
// line (metadata) is optional when reading: without it the name is "custom", the counts are
// one more than the largest worker, stage and micro-batch seen, and each stage belongs to the
// worker whose rows name it.
#pragma once

#include <string>
#include <string_view>

#include "pipeline/schedule.h"

namespace pipewright::pipeline {

/// The schedule as CSV: the metadata line, the header line, then one row per action, worker
/// by worker in list order. Every line ends with '\n'.
std::string to_csv(const Schedule& schedule);

/// Parses CSV written by to_csv (or by hand; rows may come in any order, blank lines are
/// skipped), then validate()s the result. Throws std::invalid_argument naming the line for a
/// parse error (wrong header, wrong field count, non-integer, unknown kind, duplicate index,
/// bad metadata), naming the worker for a gap in its indices, or with validate()'s message.
Schedule from_csv(std::string_view text);

}  // namespace pipewright::pipeline
