// GPipe: fill-drain (Huang et al., "GPipe: Efficient Training of Giant Neural Networks using
// Pipeline Parallelism", NeurIPS 2019), in torchgpipe's clock order.
#pragma once

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// All forwards, then all backwards. Worker s (= stage s) runs
///     F(s,0) F(s,1) ... F(s,m-1)  B(s,m-1) B(s,m-2) ... B(s,0)
/// The backward of micro-batch i runs before that of i-1 on every stage, as in torchgpipe:
/// the last micro-batch's forward finishes last on the last stage, so its backward can start
/// first. Timeline for p = 3, m = 4 with tF = 1, tB = 2 (one column per time unit):
///
///     worker 0  F0 F1 F2 F3 .  .  .  .  .  .  B3 B3 B2 B2 B1 B1 B0 B0
///     worker 1  .  F0 F1 F2 F3 .  .  .  B3 B3 B2 B2 B1 B1 B0 B0 .  .
///     worker 2  .  .  F0 F1 F2 F3 B3 B3 B2 B2 B1 B1 B0 B0 .  .  .  .
///
/// Idle time per worker = (p-1)(tF+tB); bubble fraction (p-1)/(m+p-1).
/// Peak activations: every stage holds all m micro-batches before its first backward.
/// Throws std::invalid_argument if p < 1 or m < 1.
Schedule gpipe(int p, int m);

}  // namespace pipewright::pipeline
