// Zero-bubble schedules ZB-H1 and ZB-H2 (Qi, Wan, Huang, Lin, "Zero Bubble (Almost) Pipeline
// Parallelism", ICLR 2024, section 2: handcrafted schedules).
//
// The backward of a cell is split in two: I computes the gradient of the cell's input (what the
// previous stage waits for) and W the gradient of its weights (nobody waits for it). I(s,j)
// needs only I(s+1,j), so gradients travel back faster, and the W's fill the idle slots.
#pragma once

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// ZB-H1: 1F1B with the backward split, each stage's W's delayed so that every stage holds as
/// many micro-batches as the first one (min(p, m)): the peak memory of 1F1B, reached on all
/// stages instead of only the first. Stage s (= worker s):
///
///   warm-up    min(p-s-1, m) forwards (as 1F1B)
///   steady     F(s,k+w) I(s,k) [W]   -- a W runs once more than s I's are waiting for theirs
///   cool-down  I(s,k) [W], then the W's still owed, oldest first
///
/// The delayed W's land in the cool-down, where 1F1B idles waiting for gradients. Timeline for
/// p = 3, m = 6 with tF = tI = tW = 1 (1F1B with B = I + W takes 24 units; this takes 20):
///
///     worker 0  F0 F1 F2 .  .  I0 W0 F3 I1 W1 F4 I2 W2 F5 I3 W3 I4 W4 I5 W5
///     worker 1  .  F0 F1 .  I0 F2 I1 W0 F3 I2 W1 F4 I3 W2 F5 I4 W3 I5 W4 W5
///     worker 2  .  .  F0 I0 F1 I1 F2 I2 W0 F3 I3 W1 F4 I4 W2 F5 I5 W3 W4 W5
///
/// Idle per worker (p-1)(tF+tI-tW) when m >= p and tW <= tF (1F1B: (p-1)(tF+tI+tW)): a third
/// of 1F1B's bubble with equal costs. Throws std::invalid_argument if p < 1 or m < 1.
Schedule zb_h1(int p, int m);

/// ZB-H2: more memory, (almost) no bubble. Up to 2p-1 micro-batches in flight on every stage
/// (the paper's (2p-1) M_B): the extra warm-up forwards fill the gap before the first gradient
/// arrives, and at the tail the I's run first so that gradients keep flowing while the W's fill
/// the gaps. The order is read off a unit-cost replay in which each free stage takes an
/// arrived I first, else an F if fewer than 2p-1 micro-batches are in flight, else an owed W
/// (see zero_bubble.cc). With tF = tI = tW and m >= 2p-1 every worker is busy without a
/// gap from its first action to its last: worker s runs from s*tF to s*tF + 3m*tF, a
/// parallelogram, and the only idle time is its diagonal start and end, which the paper
/// overlaps with the neighbouring iterations (optimizer post-validation). Within a single
/// iteration the makespan is 3m + p - 1 units for every m >= p, the same as ZB-H1's with equal
/// costs; ZB-H2 pays off once iterations overlap, or with unequal costs where ZB-H1 leaves
/// gaps (p = 4, m = 8, tF = tI = 1, tW = 0.5: makespan 23 against ZB-H1's 24.5).
/// Throws std::invalid_argument if p < 1 or m < 1.
Schedule zb_h2(int p, int m);

}  // namespace pipewright::pipeline
