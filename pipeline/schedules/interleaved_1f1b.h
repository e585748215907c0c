// Interleaved 1F1B (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
// Clusters Using Megatron-LM", SC 2021, section 2.2.2).
#pragma once

#include "pipeline/schedule.h"

namespace pipewright::pipeline {

/// Each worker holds v model chunks: the model is cut into p*v virtual stages and virtual
/// stage s = chunk*p + worker lives on worker s % p. A micro-batch therefore passes every
/// worker v times, and each pass is v times shorter, which divides the bubble by v.
///
/// Order on every worker (Megatron-LM's): micro-batches go in groups of p. The k-th forward
/// of a worker is micro-batch (k / (p*v))*p + k % p on chunk (k / p) % v; the k-th backward
/// takes the same micro-batch on chunk v-1 - (k / p) % v. For p = 2, v = 2, m = 4:
///
///     forwards   chunk 0: 0 1 | chunk 1: 0 1 | chunk 0: 2 3 | chunk 1: 2 3
///     backwards  chunk 1: 0 1 | chunk 0: 0 1 | chunk 1: 2 3 | chunk 0: 2 3
///
/// Worker w does w_f = min((p-w-1)*2 + (v-1)*p, m*v) warm-up forwards (all m*v when m == p),
/// then one forward / one backward pairs, then the cool-down backwards. Peak activations on
/// worker 0: p*v + p - 1 chunk-cells, i.e. A*(p + (p-1)/v) with A one micro-batch's
/// activations of a whole (non-interleaved) stage. Idle per worker (p-1)(tF+tB)/v, where
/// tF, tB are the costs of a whole stage (v chunks).
///
/// Throws std::invalid_argument if p < 1, m < 1, v < 1, or m is not a multiple of p (the
/// groups of p micro-batches must be full).
Schedule interleaved_1f1b(int p, int m, int v);

}  // namespace pipewright::pipeline
