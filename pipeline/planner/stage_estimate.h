// A stage's costs from a layer profile, without running it: the times the replay needs
// and an estimate of its memory (Note [Additive stage costs] in stage_estimate.cc). The
// planner searches with these and measures the stages of its final candidates exactly
// (stage_probe.h).
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/planner/cuts.h"
#include "pipeline/planner/model_profile.h"
#include "pipeline/planner/stage_memory.h"
#include "pipeline/schedule/replay.h"

namespace pipewright::pipeline {

/// The bytes of the portals crossing the cut before layer `cut` (Note [Cuts inside a skip],
/// cuts.h) for micro-batches of `rows` rows: each skip stashed before the cut and popped at or
/// after it, sized as its stashing layer's output (exact for an identity stash, as
/// nn::Stash).
int64_t portal_bytes(const ModelProfile& profile, const std::vector<SkipSpan>& skips, int cut,
                     int64_t rows);

/// The bytes a stage starting at layer `first` receives per micro-batch of `rows` rows: stage
/// 0's micro-batch, or the previous layer's output and the portals crossing the cut.
int64_t stage_input_bytes(const ModelProfile& profile, const std::vector<SkipSpan>& skips,
                          int first, int64_t rows);

/// Microseconds of each action of the stage made of layers [first, last) for micro-batches of
/// `rows` rows: the layers' sums (the loss on the last stage), R = F, plus the copies it
/// makes (stage 0's micro-batch, its output and its input gradient, with the portals of
/// `skips` crossing its ends) at the profile's copy speed.
StageCosts estimate_stage_times(const ModelProfile& profile, int first, int last, int64_t rows,
                                const std::vector<SkipSpan>& skips = {});

/// The StageMemory of layers [first, last) summed from the profile (exact = false), the
/// portals of `skips` crossing its ends counted in its messages.
StageMemory estimate_stage_memory(const ModelProfile& profile, int first, int last,
                                  int64_t rows, const std::vector<SkipSpan>& skips = {});

}  // namespace pipewright::pipeline
