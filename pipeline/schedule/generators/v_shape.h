// V-shaped schedules: worker w holds stages w and 2p-1-w (v_placement), so a micro-batch
// goes down the workers on its first virtual stage and back up on its second, and the loss (stage
// 2p-1) is on worker 0, beside stage 0:
//
//   stage    0   1   2   3   4   5   6   7        p = 4
//   worker   0   1   2   3   3   2   1   0        c0 = stage w, c1 = stage 2p-1-w
//
// Both orders below are reproduced from their reference implementations (the action lists
// for p = 2, m = 4 and p = 4, m = 8 are asserted in tests/pipeline/schedule/frontier_test.cc).
#pragma once

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// ZB-V (Qi, Wan, Huang, Lin, "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024, section
/// 6 / appendix; torch.distributed.pipelining's ScheduleZBVZeroBubble order). Backwards split
/// into I and W. With n = max(2p-1, m), worker r runs:
///
///   2(p-r)-1 × F(c0)                         warm-up down the V
///   r × [F(c1) F(c0)]
///   (p-r) × [F(c1) I(c1) W(c1)]              the turn: the first gradients start at once
///   n-p × [F(c0)? I(c0) W(c0) F(c1) I(c1) W(c1)]   steady (F(c0) while any is left)
///   r × [I(c0) I(c1)], (p-r) × [I(c0) W(c0)], the remaining W(c1), then W(c0)
///
/// and actions of micro-batches >= m are dropped (m < 2p-1). For p = 2, m = 4:
///
///     worker 0  F0a F1a F2a F0b I0b W0b F1b I1b W1b F3a I0a W0a F2b I2b W2b I1a W1a F3b I3b W3b I2a W2a I3a W3a
///     worker 1  F0a F0b F1a F1b I0b W0b F2a I0a W0a F2b I1b W1b F3a I1a W1a F3b I2b W2b I2a I3b I3a W2a W3b W3a
///
/// ("a" = c0, "b" = c1). With tF = tI = tW per virtual stage the workers are busy from their
/// first action to their last but for the ramp at each end, at the activation memory of 1F1B:
/// 2p virtual-stage cells (p whole-stage micro-batches) on worker 0. Throws
/// std::invalid_argument if p < 1 or m < 1.
Schedule zb_v(int p, int m);

/// DualPipeV (DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024, DualPipe; the V-shaped
/// "cut-in-half" variant in deepseek-ai/DualPipe's dualpipev.py, also torch's
/// ScheduleDualPipeV). Worker r runs eight phases:
///
///   1  2(p-r-1) × F(c0)
///   2  r+1 × [F(c0) F(c1)]
///   3  p-r-1 × [I(c1) W F(c1)]                      zero bubble at the turn
///   4  m-2p+r+1 × [F(c0) B(c1)] [F(c1) B(c0)]       overlapped pairs (see below)
///   5  p-r-1 × B(c1) [F(c1) B(c0)]
///   6  r+1 × B(c1) B(c0), switching to I's half way (at iteration ⌊(r+1)/2⌋: before the c1
///      backward when r is odd, after it when r is even)
///   7  p-r-1 × [W I(c0)]
///   8  r+1 × W
///
/// where each W runs the oldest I's weight gradient. For p = 2, m = 4:
///
///     worker 0  F0a F1a F2a F0b I0b W0b F1b F3a B1b F2b B0a B2b F3b B1a B3b I2a W2a I3a W3a
///     worker 1  F0a F0b F1a F1b F2a B0b F2b B0a F3a B1b F3b B1a B2b B2a I3b I3a W3b W3a
///
/// What we model and what not: DualPipe's point is that a bracketed [F B] pair of two
/// different micro-batches runs overlapped on one GPU, the forward's computation hiding the
/// backward's communication (expert-parallel all-to-all in DeepSeek-V3). pipewright runs a
/// pair as F then B, which is also what DeepSeek's and torch's code do when no overlapped
/// function is registered; so the order, the dependencies and the memory are DualPipeV's,
/// and the replayed time is that of F&B = F + B (no overlap gain). Requires m >= 2p;
/// throws std::invalid_argument naming m and p otherwise, or if p < 1.
Schedule dualpipev(int p, int m);

}  // namespace pipewright::pipeline
