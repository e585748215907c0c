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

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// The schedule as CSV: the metadata line, the header line, then one row per action, worker
/// by worker in list order. Every line ends with '\n'.
std::string to_csv(const Schedule& schedule);

/// Parses CSV written by to_csv (or by hand; rows may come in any order, blank lines are
/// skipped), then validate()s the result. Throws std::invalid_argument naming the line for a
/// parse error (wrong header, wrong field count, non-integer, unknown kind, duplicate index,
/// bad metadata), naming the worker for a gap in its indices, or with validate()'s message.
Schedule from_csv(std::string_view text);

// torch.distributed.pipelining's CSV (PipelineScheduleMulti._dump_csv / _load_csv): one row
// per rank, no header, one cell per time slot, each an _Action string
// "<stage><type><micro-batch>" with type F, I (input gradient), W (weight gradient) or B
// (full backward); an empty cell is an idle slot. For the ZB-V order of p = 2, m = 4:
//
//   0F0,0F1,0F2,3F0,3I0,3W0,3F1,3I1,3W1,0F3,0I0,...
//   ,1F0,2F0,1F1,2F1,2I0,2W0,1F2,1I0,1W0,...
//
// Reading also takes torch's overlapped pairs "(0F3;3B1)OVERLAP_F_B" (its sub-actions in
// order, as torch runs them without an overlap function) and its "compute_comms" rows, whose
// communication and sharding actions (SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD,
// REDUCE_GRAD) are dropped: pipewright's transport sends and receives by itself.

/// torch's compute-only CSV of `schedule` (no metadata: torch infers the stage placement from
/// the rows). Throws std::invalid_argument when the schedule has R actions (torch's format
/// has no recompute: write the schedule before with_recompute).
std::string to_torch_csv(const Schedule& schedule);

/// Parses torch's CSV into a schedule named `name`: worker = row, each stage on the one row
/// that names it, num_stages = 1 + the largest stage, num_microbatches = 1 + the largest
/// micro-batch; then validate()s it. Throws std::invalid_argument naming the row and column
/// for an action it cannot read (with the text), a stage named on two rows, a stage no row
/// names, or with validate()'s message.
Schedule from_torch_csv(std::string_view text, const std::string& name = "torch");

/// Either format, told apart by pipewright's header line ("worker,index,..."): from_csv(text)
/// when the text has it, else from_torch_csv(text, torch_name). Throws what those throw.
/// schedule_svg --from and the schedule explorer read files and pasted text with it.
Schedule from_any_csv(std::string_view text, const std::string& torch_name = "torch");

}  // namespace pipewright::pipeline
