// The pipeline runtime's own cost on the devices a plan is for: what a step costs beyond its
// layers' profiled times.
//
// Note [Runtime overhead]
// The planner times a configuration by replaying its schedule with the layers' profiled
// times (profile.h). A real step also pays for every action the runtime runs — taking it from
// the worker's list, waiting for and receiving its message, handing the result on, recording
// its trace — and once per step for waking the workers and collecting their results. At
// small micro-batches these dominate: without them the planner favours many tiny
// micro-batches that run several times slower than predicted (docs/BENCHMARKS.md,
// "Planner"). So plan() measures both on the plan's own devices with a pipeline of
// small layers (one Linear of 8 columns per worker, one row per micro-batch), 1F1B with m1
// and m2 micro-batches:
//
//   T(m) = per_step + (per_action + layer) · U(m)
//
// where T(m) is the median wall time of a train_step, U(m) the replayed makespan of 1F1B(p, m)
// with every action one unit long (the actions on the critical path), and `layer` the mean
// time of an action's own layer as the profile times it (profile.h), which a plan already
// counts: about 2 us on this project's CPU, most of an action on a GPU, where a Linear's host
// time is cuBLAS calls and launches. Two sizes give the two unknowns. The replay then adds
// per_action to every action's cost, and per_step to the step. Both are measured as the
// machine is at planning time: a busy machine gives larger ones, as it gives slower steps.
// The m1 and m2 steps alternate, so load that comes and goes falls on both medians alike.
//
// Note [Waking an idle worker]
// The probe's actions are a few microseconds long, so its workers never wait long. A real
// step's do: a worker idle while the next stage computes a 0.5 ms forward sleeps on its
// channel (channel.h), and when a core has been idle for a while the operating system (and a
// virtual machine's host, which stops polling a halted vCPU after some 100 us) takes far longer
// to run the woken thread again. Measured on this project's 2-vCPU VM with the channel's own
// condition variable: 5-7 us after 5-50 us asleep, 74-86 us after 200 us or more
// (docs/BENCHMARKS.md, "Waking an idle worker"). Since 2026-11-28 a worker waits for a
// message as for one due when it came in the last step (Note [Waiting for a message due
// soon], channel.h), which hides most of that where the steps repeat. So plan() times a
// hand-off between two threads, the receiver waiting the same way, after it has waited 20,
// 50, 100, 200, 400 and 1000 us:
//
//   wake_latency = latency(1000 us) - latency(20 us)     (the short wake is in per_action)
//   wake_after   = halfway between the longest wait woken fast and the next, woken slowly
//                  (its latency past the midpoint of the two above)
//
// and the replay starts an action wake_latency later when its worker waited longer than
// wake_after for it (Costs::wake_latency, schedule/replay.h). Where the long and the short
// wake differ by less than kNoDeepSleep (2 us) there is no such cost and both are 0: what the
// waiting hides, or a machine whose idle cores wake fast.
#pragma once

#include <vector>

#include "pipeline/planner/plan.h"
#include "tensor/device.h"

namespace pipewright::pipeline {

/// Note [Waking an idle worker]: how much longer a hand-off takes to a thread that waited
/// long, and after how long a wait (microseconds; both 0 where a long wait wakes as fast as
/// a short one).
struct WakeCosts {
  double latency_us = 0;
  double after_us = 0;
};
/// Times hand-offs through a Channel between the calling thread (busy meanwhile, as a worker
/// computing) and a thread of its own, after waits of 20 to 1000 us: ~40 ms.
WakeCosts measure_wake_costs();

/// Note [Runtime overhead]: measured on `devices` (one worker each, distinct), each worker
/// with `threads_per_worker` intra-op threads (0: as PipeOptions), the wake-up costs with
/// measure_wake_costs(). Takes ~0.1-0.5 s. Throws
/// std::invalid_argument for no devices or repeated ones, and what the Pipe throws.
RuntimeOverhead measure_runtime_overhead(const std::vector<Device>& devices,
                                         int threads_per_worker = 0);

}  // namespace pipewright::pipeline
