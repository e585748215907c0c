// Runtime: the workers of a Pipe and the interpreter that runs schedule actions on them
// (runtime.cc: the interpreter only; runtime_workers.cc: starting the workers, work outside a
// schedule, the last step's record; runtime_timeline.cc: steps traced by the device's clock;
// worker.h: a worker's thread, device and CPUs).
//
// execute(step, actions) hands worker w the list actions[w] and waits until every worker is
// done. A worker runs its list in order; each action may wait on the Transport first
// (an activation from the left for F, a gradient from the right for B/I), then computes:
//
//   worker 0:  F0@0 ─send─┐  F1@0 ─send─┐                  ┌─► B1@0   ┌─► B0@0
//   worker 1:        recv─┴► F0@1  recv─┴► F1@1   B1@1 ──send┘  B0@1 ──send┘
//                                                 (wait) = idle, not traced
//
// Only the compute part of an action is traced, so time spent waiting is the bubble.
//
// Streams (Note [Streams in the pipeline], transport.h): each worker issues everything on its
// own compute stream; the transport's copy streams carry messages, with events ordering them
// against both workers' streams, so nothing here synchronizes a device. On a GPU an action's
// traced time is therefore the host's time to *issue* it, not the device's time to run it
// (exact only where an action waits for the device, e.g. reading the loss with item()), unless
// the step asks for the device's (StepOptions::device_timeline, Note [Device timelines] in
// runtime_timeline.cc).
// When execute() returns, work may still be queued on the workers' streams; the caller's
// current streams wait for it with events (Note [The caller's streams], runtime.cc), whichever
// streams the caller uses, and what is handed back is record_stream'ed on them.
//
// Note [Anatomy of a step]
// One step of Pipe::forward + its backward (GPipe, 2 workers, 4 micro-batches, except_last):
//
//   caller thread                         worker 0 (cpu:0)          worker 1 (cpu:1)
//   ─────────────                         ────────────────          ────────────────
//   scatter x -> x0 x1 x2 x3  (views)
//   schedule = gpipe(2, 4)
//            + with_recompute(except_last)
//   validate(schedule)
//   execute(F actions) ─────────────────► F0 F1 F2 F3 ──send──►     F0 F1 F2 F3
//                     ◄── countdown ────────────────────────────────────────────┘
//   out = cat(last stage's outputs)
//   out.grad_fn = PipeBackward(step)
//   return out
//     ... user: loss(out).backward() reaches PipeBackward.apply(dOut):
//   split dOut per micro-batch
//   execute(R/B actions) ───────────────► R3? B3 R2 B2 ... ◄──send── B3 R2 B2 R1 B1 R0 B0
//                     ◄── countdown ─────────────────────────────────────────────┘
//   cat stage 0's input gradients -> dx
//
// Pipe::forward runs only the forward prefix of the GPipe schedule; the backward actions
// wait inside the PipeBackward node (pipe_backward.h) that becomes the output's grad_fn, and
// run when the user's loss.backward() reaches that node. train_step has the loss inside the
// pipeline (computed per micro-batch on the last stage), so it runs a whole schedule at once
// — which is what 1F1B, interleaved 1F1B and the zero-bubble schedules need, since they
// interleave forwards and backwards on a worker.
//
// Either way the work is data: each worker receives its list of actions and interprets it
// (Runtime::run_action). The checkpoint mode is not a flag in the runtime but a schedule
// transformation: with_recompute inserts R before the B of every checkpointed cell, and a
// cell runs its forward as a checkpoint exactly when the schedule has an R for it
// (recomputed_cells). A hand-written Schedule passed to train_step is run as given, R
// actions included, after validate() proved it complete and deadlock-free.
//
// Note [First exception wins]
//
//   worker 0:  F0  F1  F2 ──► (send, never blocks)     stops before its next action
//   worker 1:  F0  F1  F2 ✗ throws ──► step.fail(e): store e, cancel transport
//   worker 2:  F0  F1  recv(F2) ◄── cancelled: RunCancelled, swallowed
//   caller:    countdown reaches 0 ──► std::rethrow_exception(e)   same type, same message
//
// The first exception of any action is stored in the Step with its original type
// (std::exception_ptr), the Step's transport is cancelled so every recv() returns at once
// with RunCancelled, and every worker stops before its next action. execute() then rethrows
// the original exception on the caller's thread once all workers are idle. The workers are
// idle again and the Pipe stays usable: the next call makes a new Step and a new transport.
// The caller's tensors are never modified (micro-batches are views; outputs are new
// tensors). What a failed step already accumulated into .grad stays there, as with a failed
// loss.backward() in PyTorch; the deferred BatchNorm sums of a failed step are discarded
// (DeferredBatchNorm::discard), so they never reach the running statistics.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "pipeline/message_waiter.h"
#include "pipeline/processes.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/skip_layout.h"
#include "pipeline/step.h"
#include "pipeline/worker.h"
#include "tensor/threads.h"

namespace pipewright::pipeline {

class Runtime {
 public:
  /// Starts `num_workers` worker threads, each with `intra_op_threads` threads for its
  /// kernels (0: max(1, hardware_threads() / num_workers)) and a Generator seeded
  /// mix_seed(seed, w). Stage s is partitions[s], placed on stage_devices[s] and run by
  /// worker stage_worker[s]; worker w computes on a stream of its stages' device. Throws
  /// std::invalid_argument when a worker's stages are on different devices or a stage names
  /// no worker, and the backend's error when a stream cannot be created there.
  /// `skips` routes the model's skip connections between the stages (Note [Portals],
  /// stage_skips.h); empty when the model has none. `cpu_policy`: which CPUs each worker
  /// may run on (worker_cpus.h, Note [Worker CPUs]).
  Runtime(std::vector<nn::Sequential> partitions, std::vector<Device> stage_devices,
          std::vector<int> stage_worker, int num_workers, uint64_t seed,
          int intra_op_threads = 0, SkipLayout skips = {},
          WorkerCpus cpu_policy = WorkerCpus::kShared);
  /// Joins the workers.
  ~Runtime() = default;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int num_stages() const { return static_cast<int>(partitions_.size()); }
  const std::vector<nn::Sequential>& partitions() const { return partitions_; }
  nn::Sequential& partition(int s) { return partitions_.at(static_cast<size_t>(s)); }
  const std::vector<Device>& stage_devices() const { return stage_devices_; }
  const std::vector<int>& stage_worker() const { return stage_worker_; }
  const SkipLayout& skips() const { return skips_; }
  int num_workers() const { return static_cast<int>(workers_.size()); }
  Worker& worker(int w) { return *workers_.at(static_cast<size_t>(w)); }

  /// Runs actions[w] on worker w for every w and waits for all of them. Rethrows the first
  /// exception an action raised, after publishing the step (last_trace() and friends) either
  /// way. Not reentrant: one execute() per Runtime at a time.
  /// Ordered against the calling thread's current streams at both ends (Note [The caller's
  /// streams], runtime.cc): the workers' first kernels come after what the caller issued
  /// before the call, and what the caller issues after it (on its current streams of the
  /// workers' devices) comes after the workers' last kernels; outputs, input gradients and
  /// parameter gradients are record_stream'ed on the caller's current stream of their device.
  void execute(Step& step, const std::vector<std::vector<Action>>& actions);

  /// Runs only the workers `processes` says are local and calls its hooks (processes.h);
  /// null (the default): every worker is local. Set before the first execute().
  void set_processes(std::shared_ptr<Processes> processes) { processes_ = std::move(processes); }
  Processes* processes() const { return processes_.get(); }

  /// Re-seeds every worker's generator (worker w: mix_seed(seed, w), offset 0).
  void manual_seed(uint64_t seed);

  /// Runs work(w) on every local worker w at once, on the worker's thread (its compute stream,
  /// intra-op threads and generator), fenced against the caller's current streams at both
  /// ends as execute() is (Note [The caller's streams]); returns when all are done and
  /// rethrows the first exception. Serialised with execute(). For the optimizer's per-stage
  /// parts (Pipe::step).
  void run_on_workers(const std::function<void(int worker)>& work);

  /// What the last execute() did, failed or not: its step's trace and counters so far, and
  /// where it failed (Pipe::last_trace(), last_counters(), last_failure()).
  Trace last_trace() const;
  StepCounters last_counters() const;
  std::optional<Failure> last_failure() const;

  /// Test seam (fault injection): called on the worker's thread before each action with the
  /// worker, the action's index in its list and the action; what it throws is that action's
  /// exception. Set between calls only; an empty function removes it.
  using FaultHook = std::function<void(int worker, int index, const Action& action)>;
  void set_fault_hook(FaultHook hook);

 private:
  void run_actions(Step& step, int worker, const std::vector<Action>& actions);
  void hand_back(Step& step, const std::vector<Event>& done);
  /// Remembers `step`'s trace, counters and failure (the last_* accessors).
  void publish(const Step& step);
  void run_action(Step& step, int worker, const Action& action);
  /// The action's start (after its input's wait): the host's time, and with
  /// StepOptions::device_timeline the worker's timing event (Note [Device timelines]).
  void start_action(Step& step, int worker, TraceEvent& event);
  /// Note [Device timelines] (runtime_timeline.cc): the references before the workers start,
  /// and the conversion after they are done.
  void start_device_clocks(Step& step);
  void finish_device_clocks(Step& step);
  /// With a device timeline: the action's end event, once (Note [Device timelines]).
  void end_on_device(Step& step, int worker);
  void forward(Step& step, int worker, const Action& action, TraceEvent& event);
  void backward(Step& step, int worker, const Action& action, TraceEvent& event);
  /// Receives `key` on worker `worker`'s thread, waiting for it as for a message due when it
  /// came in the last step (Note [Waiting for a message due soon], channel.h).
  nn::Tensors receive(Step& step, int worker, const MessageKey& key);
  /// Sends `tensors` under `key` to its receiver's device, traced as a TraceTransfer of the
  /// sending stage's worker (the receiver's neighbour, or the other end of the key's portal).
  void send(Step& step, const MessageKey& key, nn::Tensors tensors);
  /// Receives the portal messages of `routes` for micro-batch j (one tensor each).
  nn::Tensors recv_portals(Step& step, int worker, const std::vector<int>& routes, int j,
                           Direction d);
  /// Sends the last routes.size() entries of `tensors` through their portals and removes them.
  void send_portals(Step& step, const std::vector<int>& routes, int j, Direction d,
                    nn::Tensors& tensors);
  StageFn stage_fn(Step& step, int stage, int microbatch);

  std::vector<nn::Sequential> partitions_;
  std::vector<Device> stage_devices_;
  std::vector<int> stage_worker_;
  SkipLayout skips_;
  std::vector<std::unique_ptr<Worker>> workers_;
  // How each worker waits for its messages (message_waiter.h); touched only on its thread.
  std::vector<MessageWaiter<MessageKey>> waiters_;
  std::shared_ptr<Processes> processes_;
  std::mutex execute_mutex_;
  mutable std::mutex last_mutex_;
  Trace last_trace_;
  StepCounters last_counters_;
  std::optional<Failure> last_failure_;
  FaultHook fault_hook_;
};

}  // namespace pipewright::pipeline
