// run_parts: the intra-op threads of CPU kernels, without OpenMP.
//
// Note [Waiting without burning a core]
// A kernel that splits its work over k intra-op threads (tensor/threads.h) runs part of it on
// the calling thread and the rest on k - 1 helper threads that belong to the calling thread
// (made on its first parallel call, so they inherit its CPU affinity: a pipeline worker's
// helpers stay on the worker's cores). Between kernels the helpers wait, and so does the
// caller for the last part; how they wait decides what happens on a busy machine:
//   - OpenMP's default (libgomp, OMP_WAIT_POLICY unset) spins for a long while at every
//     barrier. On a quiet machine that wins a few microseconds per kernel; beside one other
//     busy process it loses everything: a thread spins on a core for a partner the scheduler
//     put behind the other process, and the step ran many times slower (docs/BENCHMARKS.md,
//     "Contention").
//   - here a waiter spins for a while, then sleeps on a condition variable until the work
//     arrives; and parts are taken from a shared counter, not assigned, so a thread that the
//     scheduler keeps off the CPU does not hold the others up: whoever is running takes the
//     next part. The spin is 200 µs on a core of its own: long enough to span the serial
//     stretches between one kernel and the next in a training step, since waking a sleeping
//     helper costs the caller a system call and, where idle cores halt (a VM's vCPUs), the
//     helper tens of microseconds (the main job's --workers 1 ran 1.04x faster than with
//     50 µs, ahead in 22 of 25 rounds). On a core shared with other work (Note [A core
//     shared with other work], tensor/threads.h: the waiting thread itself waited for a CPU
//     over 10 % of its runnable time in its last window) it is at most 50 µs, as spinning
//     then takes the core from the very work it waits for (a fixed 200 µs ran 0.87x as fast
//     beside a busy process).
// PIPEWRIGHT_SPIN_US in the environment sets the spin on a core of its own (microseconds;
// 0: sleep at once, everywhere: the pipeline workers' waits too).
// Results do not depend on which thread runs a part: every kernel computes each output from
// its own part alone, in a fixed order.
#pragma once

#include <cstdint>
#include <functional>

namespace pipewright {

/// Calls part(p) for every p in [0, parts), on the calling thread and on up to
/// min(parts, intra_op_threads()) - 1 helper threads of the calling thread, each p exactly
/// once, in no particular order and concurrently; returns when all have returned. `part` must
/// not throw (kernels validate their inputs before they split the work); an exception escaping
/// it terminates the process, as an exception escaping an OpenMP region does.
void run_parts(int64_t parts, const std::function<void(int64_t part)>& part);

/// How long a waiting thread spins before it sleeps, in microseconds
/// (Note [Waiting without burning a core]).
int64_t spin_microseconds();

/// Helper threads the calling thread has made so far (for tests).
int helper_threads();

/// The name every helper thread carries (pthread_setname_np; /proc/self/task/*/comm, top -H).
inline constexpr char kHelperThreadName[] = "pw-intra-op";

}  // namespace pipewright
