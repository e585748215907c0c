// Which cells recompute: per (stage, micro-batch), chosen where the memory cap demands it and
// where the recompute hides in idle time, not a global mode.
//
// Note [Placing recomputes]
// Start from the schedule without R. While a device's predicted peak (memory_replay.h) is
// above the cap, look at the moment of that peak: the cells of that worker whose forward ran
// before it and whose backward (B or I) runs after it hold their full activations there;
// checkpointing one keeps only its input and moves its activations to an R just before its
// backward (with_recompute). Among them take first the cells whose backward waits longest in
// the replayed timeline (the gap before it, where a worker waiting for the gradient can
// recompute for free), or else the one that saves the most; checkpoint it, replay and
// replay again. It stops when every device fits,
// when the step has become slower than `give_up_us`, or when no cell is left to checkpoint
// at the peak; then every cell checkpointed is tried last (an R's own peak or the messages
// can make a partial placement or none the leaner, so that one is not always the least).
//
// One cell at a time, the path of placements tried does not depend on the cap: the cap only
// says where the path stops. So the least peak along the path (least_peak) is the smallest
// cap this placement reaches for the configuration, and every cap at or above it is
// reached: the planner's refusal names that number (planner.h).
//
//
//   1F1B, p = 2, m = 4, a cap below two of stage 0's cells at once (planner_memory_test):
//     worker 0  F0 F1 B0 F2 R1 B1 F3 R2 B2 R3 B3   the cells recorded while another's
//     worker 1  F0 B0 F1 B1 F2 B2 F3 B3            backward runs are checkpointed
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/planner/memory_replay.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/replay.h"

namespace pipewright::pipeline {

struct RecomputePlacement {
  Schedule schedule;               // the input schedule with the chosen R actions
  ScheduleReplay replay;
  std::vector<DevicePeak> peaks;   // per device (bounds only with worst_case)
  int recomputed = 0;              // cells checkpointed
  bool fits = false;               // every device's predicted peak <= cap
  int64_t least_peak = 0;          // the least max_level of the placements tried

  /// The largest device's peak: DevicePeak::high with `worst_case`, else predicted.
  int64_t max_level(bool worst_case) const;
};

/// Note [Placing recomputes]. `schedule` must have no R yet and be valid; cap <= 0 means no
/// cap (nothing is recomputed). With `worst_case`, a device fits when its peak with every
/// message that may have arrived (DevicePeak::high) is within the cap, else the replayed
/// order's (predicted). Throws what replay_schedule() and replay_memory() throw.
RecomputePlacement place_recomputes(const Schedule& schedule, const Costs& costs,
                                    const MemoryModel& model, int64_t cap,
                                    double give_up_us = 0, bool worst_case = false);

/// The same schedule with every cell checkpointed (bounds replayed with `worst_case`).
RecomputePlacement recompute_everything(const Schedule& schedule, const Costs& costs,
                                        const MemoryModel& model, bool worst_case = true);

}  // namespace pipewright::pipeline
