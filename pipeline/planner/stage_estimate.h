// A stage's costs from a layer profile, without running it: the times the replay needs
// and an estimate of its memory (Note [Additive stage costs] in stage_estimate.cc). The
// planner searches with these and measures the stages of its final candidates exactly
// (stage_probe.h).
#pragma once

#include <cstdint>

#include "pipeline/planner/profile.h"
#include "pipeline/planner/stage_probe.h"
#include "pipeline/schedule/replay.h"

namespace pipewright::pipeline {

/// Microseconds of each action of the stage made of layers [first, last) for micro-batches of
/// `rows` rows: the layers' sums (the loss on the last stage), R = F, plus the copies it
/// makes (stage 0's micro-batch, its output and its input gradient) at the profile's copy
/// speed.
StageCosts estimate_stage_times(const ModelProfile& profile, int first, int last, int64_t rows);

/// The StageMemory of layers [first, last) summed from the profile (exact = false).
StageMemory estimate_stage_memory(const ModelProfile& profile, int first, int last,
                                  int64_t rows);

}  // namespace pipewright::pipeline
