// replay: runs a schedule on paper. Given what each action costs, it computes when every
// action starts and ends (dependency rules of schedule.h, replayed as in deps.h), the
// makespan, each worker's idle time, the bubble fraction and the peak number of micro-batch
// activations each stage and worker holds.
//
// Cost convention: costs are per action on ONE (virtual) stage. Defaults: tF = 1, tB = 2
// (a backward costs about two forwards), and for split backwards tI = tW = 1 (tI + tW = tB);
// a recompute costs a forward. With interleaving, a virtual stage is 1/v of a worker's model,
// so costs per virtual-stage action are 1/v of a whole stage's.
//
// Memory convention (counted in "cells": one micro-batch's activations on one stage; timing
// does not matter because a stage's memory only changes on its own worker, in list order):
//   - a cell that is NOT checkpointed (no R in the schedule) holds full activations from the
//     start of its F until the end of its B, or of its W when the backward is split (W still
//     needs the layer inputs);
//   - a checkpointed cell (it has an R) holds only its input ("checkpointed input") from the
//     start of its F until its R starts, then full activations from the start of its R until
//     the end of its B / W.
// Peaks per worker sum the cells of all the worker's stages at each point of its list.
#pragma once

#include <vector>

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// Duration of each kind of action on one stage.
struct StageCosts {
  double forward = 1.0;
  double backward = 2.0;
  double backward_input = 1.0;
  double backward_weight = 1.0;
  double recompute = 1.0;

  double of(ActionKind kind) const;
};

struct Costs {
  StageCosts uniform;                  // every stage, unless per_stage is given
  std::vector<StageCosts> per_stage;   // measured costs, one entry per (virtual) stage
  double comm_latency = 0.0;           // added to each dependency between two workers
  /// An action whose worker waited longer than wake_after for it (idle since its previous
  /// action ended, for a message) starts wake_latency later: the time an operating system
  /// takes to run a thread again once its core has gone idle (Note [Waking an idle worker],
  /// pipeline/planner/runtime_overhead.h). 0: no such cost. replay_on_shared_processors
  /// ignores both: a core shared by more workers than it runs at once seldom goes idle.
  double wake_latency = 0.0;
  double wake_after = 0.0;

  /// Costs with tF, tB (and tI = tW = tB/2, tR = tF) on every stage.
  static Costs unit(double forward = 1.0, double backward = 2.0);
  /// Costs with tF, tI, tW (tB = tI + tW, tR = tF) on every stage.
  static Costs split(double forward, double backward_input, double backward_weight);

  double of(const Action& a) const;
};

struct TimedAction {
  Action action;
  double start = 0.0;
  double end = 0.0;
};

/// Peak number of cells held at once (see the memory convention above).
struct MemoryPeaks {
  std::vector<int> stage_activations;          // full activations, per stage
  std::vector<int> stage_checkpointed_inputs;  // stashed inputs of checkpointed cells, per stage
  std::vector<int> worker_activations;         // full activations, per worker (all its stages)
  std::vector<int> worker_checkpointed_inputs;
};

struct ScheduleReplay {
  std::vector<std::vector<TimedAction>> timeline;  // per worker, in schedule order
  double makespan = 0.0;                           // end of the last action (all start at 0)
  std::vector<double> busy;                        // per worker: sum of its actions' costs
  std::vector<double> idle;                        // per worker: makespan - busy
  double bubble_fraction = 0.0;                    // sum(idle) / (num_workers * makespan)
  MemoryPeaks memory;
};

/// Peak activations of a schedule (timing-independent). Requires a valid schedule.
MemoryPeaks peak_memory(const Schedule& schedule);

/// Validates `schedule` (throws what validate() throws), then replays it with `costs`.
/// Throws std::invalid_argument if a cost, a latency or wake_after is negative, or per_stage is given
/// with a size other than num_stages.
ScheduleReplay replay_schedule(const Schedule& schedule, const Costs& costs = Costs{});

/// Note [Workers sharing processors]
/// replay_schedule gives every worker a processor of its own. When the workers' threads
/// outnumber the processors (CPU workers of one process on a machine with fewer cores), they
/// take turns: here each running action needs `threads` processors, and while k workers have
/// an action running each advances at min(1, processors / (k · threads)) of its full speed
/// (processor sharing: an OS's fair scheduler gives runnable threads equal turns). A worker
/// waiting for a message needs none, so one stage's bubble is another's time: the step lies
/// between the critical path and all the work divided among the processors.
///
/// The same replay with the workers sharing `processors` processors (timeline, makespan,
/// busy, idle and bubble in wall time, so a slowed action is busy for longer than its cost);
/// replay_schedule's answer when processors >= num_workers · threads. Throws as
/// replay_schedule, and std::invalid_argument when processors or threads < 1.
ScheduleReplay replay_on_shared_processors(const Schedule& schedule, const Costs& costs,
                                           int processors, int threads);

}  // namespace pipewright::pipeline
