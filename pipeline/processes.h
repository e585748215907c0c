// Processes: the hooks through which a Pipe runs with its workers spread over processes.
//
// A Pipe whose PipeOptions::processes is null (the default) runs every worker as a thread of
// this process, exactly as before. With a Processes object (distributed/mpi_processes.h
// makes one over MPI), every process builds the same Pipe (same model, options and seed) and
// runs only its own workers; the other workers' threads exist but receive no actions. The
// interpreter (runtime.h) and the schedule are unchanged; only these hooks differ:
//
//   Pipe::train_step                       Runtime::execute, worker w (local)
//   ─────────────────                      ──────────────────────────────────
//   make_transport() ──► Step              for each action a of w's list:
//   execute ─────────────────────────────►   run a (recv / compute / send via the transport)
//                                            if a is the last action of stage s with a
//                                            backward: stage_finished(s)  (starts the
//                                            data-parallel reduction of s's gradients)
//                                          worker_finished(w)  (waits for those reductions)
//   step_finished(step) ◄── (all local workers done)
//     (shares the losses, which only the last stage's process computed)
//   step_failed(step, error) on failure: the exception the caller sees.
//
// A Processes object belongs to one Pipe (its per-step state is not shared).
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "nn/sequential.h"
#include "pipeline/transport.h"

namespace pipewright::pipeline {

class Step;

class Processes {
 public:
  virtual ~Processes() = default;
  /// Whether worker `worker` runs in this process.
  virtual bool runs_worker(int worker) const = 0;
  /// How many processes of the run share this machine's cores: with threads_per_worker 0,
  /// a worker gets max(1, hardware_threads() / this) intra-op threads.
  virtual int processes_on_this_machine() const = 0;
  /// The transport of one new step (called once per step, on the caller's thread);
  /// `stage_worker[s]` is the worker of stage s (the Pipe's placement: round robin, V, ...).
  virtual std::unique_ptr<Transport> make_transport(const std::vector<int>& stage_worker) = 0;
  /// On the worker's thread, right after the last action of `stage` in a step that ran a
  /// backward: the stage's parameter gradients are final for this step.
  virtual void stage_finished(int stage, nn::Sequential& partition) = 0;
  /// On the worker's thread, after its last action (also when the step failed; then it must
  /// not block). Throws what the work started in stage_finished threw.
  virtual void worker_finished(int worker, bool failed) = 0;
  /// On the caller's thread after a successful execute(): makes step.losses (computed by the
  /// last stage's process) known to every process. Throws on communication errors.
  virtual void step_finished(Step& step) = 0;
  /// On the caller's thread after a failed execute(): the exception to rethrow (the original
  /// one, or one naming where the run failed).
  virtual std::exception_ptr step_failed(const Step& step, std::exception_ptr error) = 0;
  /// Σ of `value` (its maximum, with max) over the processes that run one replica's workers,
  /// each bringing its own stages' share: how Pipe::clip_grad_norm totals its gradient norm.
  /// Collective over those processes; called on the caller's thread between steps. Throws on
  /// communication errors.
  virtual double combine_over_pipeline(double value, bool max) = 0;
  /// Element-wise Σ of each of `tensors` (CPU, contiguous, float) over the processes that run
  /// one replica's workers, in place: every process passes the same shapes and dtypes
  /// (zeros for what it holds no share of) and gets the same sums back. How tied parameters'
  /// gradients are summed (Note [Tied parameters], tied_parameters.h). Collective over those
  /// processes; called on the caller's thread between steps. Throws on communication errors.
  virtual void sum_over_pipeline(nn::Tensors& tensors) = 0;
};

}  // namespace pipewright::pipeline
