// 1F1B, a.k.a. PipeDream-Flush (Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN
// Training", ICML 2021; the non-interleaved schedule of Megatron-LM).
#pragma once

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// One forward, one backward. Stage s (= worker s) runs three phases:
///
///   warm-up    w = min(p-s-1, m) forwards           F(s,0) ... F(s,w-1)
///   steady     m-w pairs  F(s,w+i) B(s,i)           i = 0 .. m-w-1
///   cool-down  the w backwards left                 B(s,m-w) ... B(s,m-1)
///
/// so at most min(p-s, m) micro-batches are in flight on stage s (GPipe keeps m). Timeline for
/// p = 3, m = 6 with tF = 1, tB = 2 (one column per time unit), phases of worker 0 above it:
///
///               warm |------------------- steady --------------------|--- cool-down ---|
///     worker 0  F0 F1 F2 .  .  .  .  B0 B0 F3 B1 B1 F4 B2 B2 F5 B3 B3 .  B4 B4 .  B5 B5
///     worker 1  .  F0 F1 .  .  B0 B0 F2 B1 B1 F3 B2 B2 F4 B3 B3 F5 B4 B4 .  B5 B5 .  .
///     worker 2  .  .  F0 B0 B0 F1 B1 B1 F2 B2 B2 F3 B3 B3 F4 B4 B4 F5 B5 B5 .  .  .  .
///
/// Worker 0 holds F0..F2 (3 = p micro-batches) while it waits for B0's gradient: the cost of
/// keeping the last stage busy. The last worker never waits inside the steady state.
///
/// Same bubble as GPipe, (p-1)(tF+tB) idle per worker, with activations for min(p-s, m)
/// micro-batches instead of m. The backwards run in increasing micro-batch order.
///
/// With m < p the first stages have w = m: they run all m forwards, then all m backwards
/// (fill-drain, like GPipe, with every micro-batch in flight); the later stages still
/// alternate. The schedule stays valid and deadlock-free for every m >= 1.
/// Throws std::invalid_argument if p < 1 or m < 1.
Schedule one_f_one_b(int p, int m);

}  // namespace pipewright::pipeline
