#include "examples/common/run_setup.h"

#include <algorithm>

#include "autograd/precision.h"
#include "examples/common/progress.h"
#include "pipeline/schedule/registry.h"

namespace pipewright::examples {

std::vector<Device> worker_devices(const TrainConfig& config) {
  if (!config.devices.empty()) return config.devices;
  std::vector<Device> devices;
  for (int s = 0; s < config.workers; ++s) devices.push_back(Device::cpu(s));
  return devices;
}

Device data_device(const std::vector<Device>& worker_devices) {
  int index = 0;
  for (const Device& d : worker_devices) {
    if (d.is_cpu()) index = std::max(index, d.index + 1);
  }
  return Device::cpu(index);
}

std::shared_ptr<distributed::MpiProcesses> make_processes(const TrainConfig& config) {
  if (!config.distributed) return nullptr;
  return std::make_shared<distributed::MpiProcesses>(MPI_COMM_WORLD, config.workers,
                                                     config.data_parallel,
                                                     num_partitions(config));
}

pipeline::PipeOptions pipe_options(const TrainConfig& config, const std::vector<int>& balance,
                                   const std::vector<Device>& devices,
                                   std::shared_ptr<distributed::MpiProcesses> processes,
                                   const pipeline::Plan* plan) {
  const std::vector<Device> workers(devices.begin(), devices.begin() + config.workers);
  pipeline::PipeOptions options =
      plan != nullptr ? plan->pipe_options(workers)
                      : pipeline::PipeOptions{
                            .balance = balance,
                            .devices = workers,
                            .chunks = config.chunks,
                            .schedule = {.name = config.schedule,
                                         .virtual_stages = virtual_stages_per_worker(config),
                                         .recompute = config.checkpoint}};
  options.seed = config.seed;
  options.threads_per_worker = config.threads;
  options.precision = config.precision;
  options.cuda_graphs = config.cuda_graphs;
  options.processes = std::move(processes);
  return options;
}

pipeline::PlanOptions plan_options(const TrainConfig& config) {
  pipeline::PlanOptions options{.memory_cap_bytes = config.memory_cap,
                                .precision = config.precision,
                                .threads_per_worker = config.threads,
                                .cache = config.plan_cache};
  if (config.plan_trials >= 0) options.trials = config.plan_trials;
  return options;
}

void print_pipeline_header(std::ostream& out, const TrainConfig& config,
                           const pipeline::Pipe& pipe, const std::vector<int>& balance,
                           const std::vector<Device>& devices, int64_t num_params,
                           const std::string& planned) {
  if (config.distributed) {
    out << "processes: " << config.workers * config.data_parallel << " MPI ranks = "
        << config.workers << " workers x " << config.data_parallel
        << " data-parallel replicas (rank = replica * " << config.workers
        << " + worker; rank 0 prints)\n";
  }
  out << "model: " << pipe.module().str() << " (" << format_count(static_cast<double>(num_params))
      << " parameters)\n"
      << "pipeline: " << config.workers << " workers on";
  for (int s = 0; s < config.workers; ++s) {
    out << " " << devices[s].str() << (s + 1 < config.workers ? "," : "");
  }
  if (!planned.empty()) {
    out << " | planned: " << planned << "\n";
    return;
  }
  if (virtual_stages_per_worker(config) > 1) {
    out << " | " << virtual_stages_per_worker(config) << " virtual stages each ("
        << pipeline::to_string(pipeline::find_schedule(config.schedule).placement)
        << ") = " << num_partitions(config) << " stages";
  }
  out << " | balance";
  for (int b : balance) out << " " << b;
  out << " | chunks " << config.chunks << " | schedule " << config.schedule << " | checkpoint "
      << pipeline::to_string(config.checkpoint);
  if (config.precision != autograd::Precision::kFloat32) {
    out << " | precision " << autograd::precision_name(config.precision);
  }
  if (config.float32_matmul_precision != Float32MatmulPrecision::kHighest) {
    out << " | float32 matmuls "
        << float32_matmul_precision_name(config.float32_matmul_precision) << " (TF32)";
  }
  out << "\n";
}

Tensor whole_model_forward(pipeline::Pipe& pipe, const Tensor& x,
                           const distributed::MpiProcesses* processes) {
  if (processes == nullptr) return pipe.forward(x);
  autograd::PrecisionScope precision(pipe.options().precision);  // as the Pipe's cells run
  Tensor y = x;
  size_t layer = 0;
  for (size_t s = 0; s < pipe.balance().size(); ++s) {
    y = y.to(pipe.stage_devices()[s]);
    for (int i = 0; i < pipe.balance()[s]; ++i) {
      y = autograd::round_to_precision(pipe.module()[layer++].forward(y));  // as Sequential's
    }
  }
  return y;
}

namespace {
/// `step()`, and on failure "step failed at <where>" on `log`, the exception unchanged.
template <class Step>
pipeline::StepResult reporting_failure(pipeline::Pipe& pipe, std::ostream& log, Step step) {
  try {
    return step();
  } catch (...) {  // the exception is unchanged; say where in the pipeline it began
    if (auto failure = pipe.last_failure()) log << "\nstep failed at " << failure->str() << "\n";
    throw;
  }
}
}  // namespace

pipeline::StepResult train_one_step(pipeline::Pipe& pipe, distributed::MpiProcesses* processes,
                                    const Tensor& input, const Tensor& target,
                                    const pipeline::LossFn& loss_fn, std::ostream& log,
                                    const pipeline::StepOptions& options) {
  return reporting_failure(pipe, log, [&] {
    return processes ? distributed::train_step(pipe, input, target, loss_fn, options)
                     : pipe.train_step(input, target, loss_fn, options);
  });
}

bool graphed_steps(const TrainConfig& config, const distributed::MpiProcesses* processes,
                   std::ostream& log) {
  if (!config.cuda_graphs) return false;
  if (processes == nullptr) return true;
  log << "--cuda-graphs: steps run eagerly across processes (one graph holds one process's "
         "step)\n";
  return false;
}

pipeline::StepResult graphed_step(pipeline::Pipe& pipe, nn::Optimizer& optimizer,
                                  nn::GradScaler& scaler, const Tensor& input,
                                  const Tensor& target, const pipeline::LossFn& loss_fn,
                                  std::ostream& log, double grad_clip) {
  return reporting_failure(pipe, log, [&] {
    return pipe.train_step(input, target, loss_fn, optimizer,
                           {.max_grad_norm = grad_clip, .grad_scaler = &scaler});
  });
}

bool optimizer_step(pipeline::Pipe& pipe, nn::Optimizer& optimizer, nn::GradScaler& scaler,
                    double grad_clip) {
  pipe.unscale_grads(scaler);  // before clipping: the threshold is for the true gradients
  if (grad_clip > 0) pipe.clip_grad_norm(grad_clip);
  const bool steps = !scaler.found_inf();
  if (steps) pipe.step(optimizer);  // each stage's parameters on its worker
  scaler.update();
  return steps;
}

nn::GradScaler grad_scaler_for(const TrainConfig& config) {
  return nn::GradScaler({.enabled = config.precision == autograd::Precision::kFloat16});
}

StepTracer::StepTracer(const TrainConfig& config, distributed::MpiProcesses* processes)
    : path_(config.trace), step_(config.trace_step), processes_(processes) {}

bool StepTracer::before(int64_t n) {
  const bool now = !path_.empty() && !traced_ && n >= step_;
  if (now && processes_ != nullptr) processes_->barrier();
  return now;
}

void StepTracer::after(const pipeline::StepResult& step) {
  const pipeline::Trace trace = processes_ ? processes_->gather_trace(step.trace) : step.trace;
  if (processes_ == nullptr || processes_->rank() == 0) trace.write_chrome_json(path_);
  traced_ = true;
}

void StepTracer::report(std::ostream& log, int64_t steps_run) const {
  if (path_.empty()) return;
  if (traced_) {
    log << "trace of step " << step_ << " written to " << path_ << "\n";
  } else {
    log << "no trace written: --trace-step " << step_ << " is past the run's " << steps_run
        << " steps\n";
  }
}

}  // namespace pipewright::examples
