// Setting up an example's pipeline from the shared flags (examples/common/config.h):
// devices, processes under mpirun, the Pipe's options, and the header lines every run prints.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "distributed/mpi_processes.h"
#include "examples/common/config.h"
#include "nn/grad_scaler.h"
#include "nn/optimizer.h"
#include "pipeline/pipe.h"
#include "pipeline/planner/planner.h"

namespace pipewright::examples {

/// The devices of the workers: config.devices, or cpu:0 .. cpu:(workers-1).
std::vector<Device> worker_devices(const TrainConfig& config);

/// A virtual CPU device after the workers' ones: data sets live there, so each worker's memory
/// counters show only its stages' parameters and activations.
Device data_device(const std::vector<Device>& worker_devices);

/// This rank's MpiProcesses when config.distributed (workers x data_parallel ranks), else null.
std::shared_ptr<distributed::MpiProcesses> make_processes(const TrainConfig& config);

/// The Pipe's options on the first config.workers devices: `plan`'s (--plan auto: cut, chunks,
/// schedule and its recomputes, Plan::pipe_options) or else the flags' (balance, chunks,
/// schedule, virtual stages, checkpoint); then the flags' seed (the same on every replica:
/// random layers key their draws by each sample's index in the global batch), threads and
/// `processes`.
pipeline::PipeOptions pipe_options(const TrainConfig& config, const std::vector<int>& balance,
                                   const std::vector<Device>& devices,
                                   std::shared_ptr<distributed::MpiProcesses> processes,
                                   const pipeline::Plan* plan = nullptr);

/// The planner's options from the flags (--plan auto): memory cap, threads per worker, the
/// cache file, the trials; the caller adds what its model needs (the optimizer's state,
/// deferred BatchNorm, tied parameters).
pipeline::PlanOptions plan_options(const TrainConfig& config);

/// "processes: ..." (across processes), "model: ... (N parameters)", "pipeline: 2 workers on
/// cpu:0, cpu:1 | balance 4 5 | chunks 4 | schedule gpipe | checkpoint never" (with virtual
/// stages "| 2 virtual stages each (V) = 4 stages" after the devices); with `planned`
/// (pipeline::Plan::str(), --plan auto) "| planned: <planned>" in place of the flags' cut,
/// chunks, schedule and checkpoint.
void print_pipeline_header(std::ostream& out, const TrainConfig& config,
                           const pipeline::Pipe& pipe, const std::vector<int>& balance,
                           const std::vector<Device>& devices, int64_t num_params,
                           const std::string& planned = "");

/// The whole model on `x` in the modules' current mode: pipe.forward(x) in one process; across
/// processes every stage runs here, in order, each on its own device (call
/// MpiProcesses::share_stage_state first so this rank holds every stage's current weights).
Tensor whole_model_forward(pipeline::Pipe& pipe, const Tensor& x,
                           const distributed::MpiProcesses* processes);

/// One training step: distributed::train_step across processes (`processes` set), else
/// pipe.train_step. A failure is reported on `log` ("step failed at <where>") and rethrown
/// unchanged.
pipeline::StepResult train_one_step(pipeline::Pipe& pipe, distributed::MpiProcesses* processes,
                                    const Tensor& input, const Tensor& target,
                                    const pipeline::LossFn& loss_fn, std::ostream& log,
                                    const pipeline::StepOptions& options = {});

/// The step's end after train_one_step(..., {.loss_scale = scaler.scale()}): the gradients
/// unscaled (--precision fp16; a disabled scaler does nothing), clipped to `grad_clip` when
/// positive, and the optimizer's step on every stage unless a gradient overflowed somewhere in
/// the pipeline (nn/grad_scaler.h); then the scale updated. Returns whether it stepped.
bool optimizer_step(pipeline::Pipe& pipe, nn::Optimizer& optimizer, nn::GradScaler& scaler,
                    double grad_clip = 0.0);

/// --cuda-graphs where a graph can hold the whole step: one process. Says on `log` why not
/// otherwise.
bool graphed_steps(const TrainConfig& config, const distributed::MpiProcesses* processes,
                   std::ostream& log);

/// The whole step (zero_grad, train_step, float16's loss scaling by `scaler`, clipping to
/// `grad_clip` when positive, the optimizer on every stage) as one call,
/// pipe.train_step(input, target, loss_fn, optimizer, {.max_grad_norm = grad_clip,
/// .grad_scaler = &scaler}), which PipeOptions::cuda_graphs captures and replays. Its
/// unscaling and clipping are computed on the device (Notes [Loss scaling without a host
/// read], [Clipping without a host read]): the same up to rounding as optimizer_step's. A
/// failure is reported on `log` as train_one_step does.
pipeline::StepResult graphed_step(pipeline::Pipe& pipe, nn::Optimizer& optimizer,
                                  nn::GradScaler& scaler, const Tensor& input,
                                  const Tensor& target, const pipeline::LossFn& loss_fn,
                                  std::ostream& log, double grad_clip = 0.0);

/// A GradScaler that scales float16 runs only (torch.amp.GradScaler's defaults).
nn::GradScaler grad_scaler_for(const TrainConfig& config);

/// --trace / --trace-step: the Chrome trace of the run's trace_step-th step (across
/// processes one trace, a process per rank, written by rank 0).
class StepTracer {
 public:
  StepTracer(const TrainConfig& config, distributed::MpiProcesses* processes);
  /// Before the run's n-th step (1-based): whether to trace it (then, across processes, the
  /// ranks' step clocks start together).
  bool before(int64_t n);
  /// After the traced step.
  void after(const pipeline::StepResult& step);
  /// The closing line: where the trace went, or that the run was shorter than trace_step.
  void report(std::ostream& log, int64_t steps_run) const;

 private:
  std::string path_;
  int64_t step_;
  distributed::MpiProcesses* processes_;
  bool traced_ = false;
};

}  // namespace pipewright::examples
