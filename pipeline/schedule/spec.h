// ScheduleSpec: how a Pipe schedules every step, as one value: a registered schedule, its
// virtual stages and stage placement, and what recomputes. The Pipe builds the schedule from
// it for whatever number of micro-batches a batch splits into (a short last batch has fewer),
// so a plan (pipeline/planner/planner.h: Plan::pipe_options) is a PipeOptions and nothing
// else:
//
//   Pipe pipe(model, {.balance = {2, 2}, .devices = cpus, .chunks = 8,
//                     .schedule = {.name = "1f1b", .recompute = Checkpoint::kNever}});
//   Pipe planned(model, plan.pipe_options(devices));   // recompute: the plan's cells
//
// What recomputes is torchgpipe's checkpoint mode (the same on every stage) or an explicit
// set of cells (stage, micro-batch), as the planner places them where a device is short of
// memory (Note [Placing recomputes], planner/recompute_placement.h).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "pipeline/schedule/checkpoint_mode.h"
#include "pipeline/schedule/generators/recompute.h"
#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// Cells that recompute, named one by one: cells[s][j] != 0 when cell (stage s, micro-batch j)
/// runs as a checkpoint (keeps only its input) and recomputes its forward before its backward.
/// One row per stage (p · v rows); a row may be shorter or longer than a batch's micro-batch
/// count: cells past its end keep their activations (a short last batch takes the rows'
/// prefix, as Plan made them for the sample's batch).
struct RecomputeCells {
  std::vector<std::vector<char>> cells;
  bool operator==(const RecomputeCells&) const = default;
};

/// What recomputes: a checkpoint mode (checkpoint_mode.h) or explicit cells.
using Recompute = std::variant<Checkpoint, RecomputeCells>;

struct ScheduleSpec {
  /// A registered schedule (schedule_names() lists them, registry.h).
  std::string name = "gpipe";
  /// v: virtual stages per worker, as the registry row allows (ScheduleInfo::virtual_stages:
  /// any v >= 2 for the interleaved schedules and looped-bfs, 2 for the V-shaped ones).
  /// PipeOptions::balance then has p · v entries (one per stage) for p workers.
  int virtual_stages = 1;
  /// The worker of each stage (p · v entries, each in [0, p), every worker holding one).
  /// Empty: the registry row's placement (round robin, or the V shape). A placement other
  /// than the row's runs only schedules given per step (StepOptions::schedule) that place
  /// their stages the same way.
  std::vector<int> stage_worker = {};
  /// Which cells recompute (train_step; Pipe::forward's backward uses it too).
  Recompute recompute = Checkpoint::kExceptLast;

  bool operator==(const ScheduleSpec&) const = default;
};

/// torch.chunk's micro-batch sizes for a batch of `rows` rows and `chunks` (PipeOptions::
/// chunks): ceil(rows / chunks) rows each, the last smaller, none empty, so a small batch makes
/// fewer than `chunks` (rows 7, chunks 4: 2,2,2,1; rows 10, chunks 8: five of 2; rows 0: none).
/// The one place the rule is written: scatter (microbatch.h), the Pipe and the planner use it.
/// Throws std::invalid_argument when rows < 0 or chunks < 1.
std::vector<int64_t> microbatch_sizes(int64_t rows, int chunks);

/// Which cells of a batch of `num_microbatches` recompute under `recompute`: the checkpoint
/// mode's predicate (checkpoint_predicate), or the cells' (false past a row's end or for a
/// stage without a row). Throws std::invalid_argument when num_microbatches < 1.
CheckpointPredicate recompute_predicate(const Recompute& recompute, int num_microbatches);

/// The schedule `spec` names for p workers and m micro-batches, its recomputes inserted:
/// with_recompute(make_schedule(spec.name, p, m, spec.virtual_stages), recompute_predicate).
/// Throws what make_schedule throws (an unknown name, a v the row refuses, an m the generator
/// refuses), and std::invalid_argument when RecomputeCells has another row count than the
/// schedule's stages (naming both).
Schedule build_schedule(const ScheduleSpec& spec, int num_workers, int num_microbatches);

/// "1f1b", "interleaved-1f1b v2", with "recompute except_last" / "recompute 6 cells".
std::string to_string(const ScheduleSpec& spec);

}  // namespace pipewright::pipeline
