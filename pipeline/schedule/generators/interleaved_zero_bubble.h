// Interleaved zero bubble (Qi et al., "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024,
// applied to Megatron-LM's interleaving; torch.distributed.pipelining's
// ScheduleInterleavedZeroBubble, whose order this reproduces).
#pragma once

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// Interleaved 1F1B (v virtual stages per worker, stage s = c·p + worker on worker s % p) with
/// every backward split into I and W, the W's delayed: worker r runs r one-forward-one-I
/// steps before it starts paying the W's it owes, then one W after each I (oldest first), and
/// the rest at the end. Micro-batches go in rounds of mpr = m / max(1, m / p); the k-th
/// forward of worker r is on virtual stage (k / mpr) % v, the k-th I on virtual stage
/// v-1 - (k / mpr) % v, each stage taking its micro-batches in order. Worker r warms up with
/// min((v-1)·mpr + p-1-r, m·v) forwards. For p = 2, v = 2, m = 4 ("a" = the worker's first
/// virtual stage, stage r; "b" its second, stage r + 2):
///
///     worker 0  F0a F1a F0b F1b I0b W0b F2a I1b W1b F3a I0a W0a F2b I1a W1a F3b I2b W2b I3b W3b I2a W2a I3a W3a
///     worker 1  F0a F1a F0b I0b F1b I1b W0b F2a I0a W1b F3a I1a W0a F2b I2b W1a F3b I3b W2b I2a W3b I3a W2a W3a
///
/// The I's run as soon as their gradients can (as interleaved 1F1B's B's would) and the W's
/// fill the gaps, which with tF = tI = tW per virtual stage removes most of interleaved 1F1B's
/// bubble at the memory of interleaved 1F1B plus the owed W's (docs/schedules.md has the numbers).
/// Throws std::invalid_argument if p < 1, m < 1, v < 1, or m is not a multiple of the rounds
/// (m % max(1, m / p) != 0).
Schedule interleaved_zero_bubble(int p, int m, int v);

}  // namespace pipewright::pipeline
