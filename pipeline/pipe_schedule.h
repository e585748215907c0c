// A Schedule as a Pipe runs it: which cells are checkpointed, which actions
// run in which phase, and whether a schedule fits a given Pipe.
//
// Pipe::forward runs GPipe in two phases, split at the first non-forward of each worker:
//
//   worker 0:  F0 F1 F2 F3 | R3 B3 R2 B2 R1 B1 R0 B0
//   worker 1:  F0 F1 F2 F3 | B3 R2 B2 R1 B1 R0 B0
//              forward()     PipeBackward::apply() (the user's loss.backward())
//
// A schedule that interleaves forwards and backwards on a worker (1F1B, ZB) cannot be split
// that way; it runs whole in train_step, where the loss is known inside the pipeline.
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// cells[s][j] != 0 when the schedule recomputes cell (stage s, micro-batch j): such a cell
/// runs its forward as a checkpoint (keeps only its input and RNG state).
std::vector<std::vector<char>> recomputed_cells(const Schedule& schedule);

struct Phases {
  std::vector<std::vector<Action>> forward;   // per worker: the leading F actions
  std::vector<std::vector<Action>> backward;  // per worker: everything after them
};

/// Splits every worker's list after its leading forwards. Throws std::invalid_argument
/// naming the worker and action when a forward comes after a non-forward (not fill-drain).
Phases split_fill_drain(const Schedule& schedule);

/// Throws std::invalid_argument when `schedule` (a registered name) is one that interleaves
/// any v >= 2 virtual stages per worker (its registry row: "interleaved-1f1b",
/// "interleaved-zb", "looped-bfs") and the pipe has virtual_stages = 1, saying how to give it
/// virtual stages and naming the schedules that run one stage per worker. Throws what
/// find_schedule throws for an unknown name.
void check_virtual_stages(const std::string& schedule, int virtual_stages);

/// Throws std::invalid_argument, naming both values, unless `schedule` has `num_workers`
/// workers, stage_worker.size() stages placed as `stage_worker`, and `num_microbatches`
/// micro-batches.
void check_schedule_fits(const Schedule& schedule, int num_workers,
                         const std::vector<int>& stage_worker, int num_microbatches);

}  // namespace pipewright::pipeline
