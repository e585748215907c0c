// Looped breadth-first pipeline parallelism (Lamy-Poirier, "Breadth-First Pipeline
// Parallelism", MLSys 2023; torch.distributed.pipelining's ScheduleLoopedBFS).
#pragma once

#include <vector>

#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

/// Each worker holds v virtual stages placed round robin (stage s = c·p + worker on worker
/// s % p, as interleaved 1F1B) and runs them breadth first: every micro-batch through its
/// first virtual stage, then every micro-batch through its second, ..., then the backwards,
/// last virtual stage first, micro-batches in reverse. GPipe looped over the virtual stages; for
/// p = 2, v = 2, m = 4 with tF = 1, tB = 2 per virtual stage ("a" = the worker's first virtual
/// stage, "b" its second):
///
///     worker 0  F0a F1a F2a F3a F0b F1b F2b F3b .   .   B3b B2b B1b B0b .   .   B3a B2a B1a B0a
///     worker 1  .   F0a F1a F2a F3a F0b F1b F2b F3b B3b B2b B1b B0b .   .   B3a B2a B1a B0a
///
/// (B's are two units wide; the picture shows their order, not their width.) While micro-
/// batches go through virtual stage 0 of every worker, the next virtual stage's work is ready
/// as soon as the last worker hands micro-batch 0 back to worker 0, so the bubble is GPipe's
/// over a v times thinner stage: idle per worker (p-1)(tF+tB)/v for m >= p, with tF, tB the
/// costs of a whole stage. The price is memory: every cell stays until its backward, m·v
/// virtual-stage cells per worker (m whole-stage micro-batches), like GPipe's m. Breadth first pays off when the
/// weights' communication (FSDP) or gradient reduction is amortised over all m micro-batches
/// per virtual stage. Throws std::invalid_argument if p < 1, m < 1 or v < 1.
Schedule looped_bfs(int p, int m, int v);

/// The same order for any stage placement (stage_worker[s] = worker of stage s, every worker
/// holding a stage): each worker runs F of its stages in ascending stage order, every
/// micro-batch, then B in descending stage order, micro-batches in reverse. Deadlock-free
/// for every placement, since a worker only waits on lower stages going forward and higher
/// ones going backward. With one stage per worker it is GPipe; it is what Pipe::forward runs
/// when a worker holds several stages (V-shaped or interleaved placements). Throws
/// std::invalid_argument if m < 1, the placement is empty, or a worker holds no stage.
Schedule looped_bfs(const std::vector<int>& stage_worker, int m);

}  // namespace pipewright::pipeline
