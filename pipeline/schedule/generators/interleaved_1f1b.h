// Interleaved 1F1B (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
// Clusters Using Megatron-LM", SC 2021, section 2.2.2).
#pragma once

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// Each worker holds v virtual stages: the model is cut into p*v stages and stage
/// s = c*p + worker (the worker's virtual stage c) lives on worker s % p. A micro-batch therefore
/// passes every worker v times, and each pass is v times shorter, which divides the bubble by v.
///
/// Order on every worker (Megatron-LM's): micro-batches go in groups of p. The k-th forward
/// of a worker is micro-batch (k / (p*v))*p + k % p on virtual stage (k / p) % v; the k-th
/// backward takes the same micro-batch on virtual stage v-1 - (k / p) % v. For p = 2, v = 2,
/// m = 4 (vN = the worker's virtual stage N):
///
///     forwards   v0: 0 1 | v1: 0 1 | v0: 2 3 | v1: 2 3
///     backwards  v1: 0 1 | v0: 0 1 | v1: 2 3 | v0: 2 3
///
/// Worker w does w_f = min((p-w-1)*2 + (v-1)*p, m*v) warm-up forwards (all m*v when m == p),
/// then one forward / one backward pairs, then the cool-down backwards. With tF = tB = 1 per
/// virtual stage ("F0b" = micro-batch 0 on the worker's second virtual stage, i.e. stage 2 or 3):
///
///     worker 0  F0a F1a F0b F1b F2a B0b F3a B1b F2b B0a F3b B1a .   B2b .   B3b B2a B3a
///     worker 1  .   F0a F1a F0b B0b F1b B1b F2a B0a F3a B1a F2b B2b F3b B3b B2a B3a .
///
/// The extra (p-w-1) warm-up forwards (the "*2") are Megatron-LM's slack for communication:
/// with zero latency a warm-up of (p-w-1) + (v-1)*p gives the same makespan with less memory,
/// but each unit of latency then shows up on the critical path (see docs/schedules.md). Peak
/// activations on worker 0: p*v + p - 1 virtual-stage cells, i.e. A*(p + (p-1)/v) with A one
/// micro-batch's activations of a whole (non-interleaved) stage. Idle per worker
/// (p-1)(tF+tB)/v, where tF, tB are the costs of a worker's whole share of the model (v virtual
/// stages).
///
/// Throws std::invalid_argument if p < 1, m < 1, v < 1, or m is not a multiple of p (the
/// groups of p micro-batches must be full).
Schedule interleaved_1f1b(int p, int m, int v);

}  // namespace pipewright::pipeline
