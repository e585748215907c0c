// Pipe: construction, the GPipe forward, and accessors. train_step lives in
// pipe_train_step.cc.
#include "pipeline/pipe.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "pipeline/deferred_batch_norm.h"
#include "pipeline/microbatch.h"
#include "pipeline/partition.h"
#include "pipeline/pipe_backward.h"
#include "pipeline/pipe_schedule.h"
#include "pipeline/processes.h"
#include "pipeline/runtime.h"
#include "pipeline/schedule/validate.h"
#include "pipeline/schedule/generators.h"
#include "pipeline/skip_layout.h"
#include "pipeline/step.h"
#include "pipeline/step_graph.h"
#include "pipeline/tied_parameters.h"
#include "tensor/graph.h"
#include "tensor/threads.h"

namespace pipewright::pipeline {
namespace {

void check_recompute_cells(const Recompute& recompute, int num_stages) {
  const auto* cells = std::get_if<RecomputeCells>(&recompute);
  if (cells != nullptr && static_cast<int>(cells->cells.size()) != num_stages) {
    throw std::invalid_argument("PipeOptions::schedule.recompute names cells of " +
                                std::to_string(cells->cells.size()) + " stages, the pipe has " +
                                std::to_string(num_stages) + " (balance has one entry per stage)");
  }
}

// Pipe::forward runs GPipe and leaves the loss to its caller: a field it cannot honour is an
// error, never silently dropped.
void refuse_step_only_options(const StepOptions& options) {
  std::string refused;
  auto add = [&refused](const std::string& field) {
    refused += (refused.empty() ? "" : ", ") + field;
  };
  if (options.schedule.has_value()) add("schedule (forward runs GPipe; use train_step)");
  if (!options.target_chunks.empty()) add("target_chunks (forward takes no targets)");
  if (options.reduction != LossReduction::kMean) add("reduction (the loss is the caller's)");
  if (options.loss_scale != 1.0) add("loss_scale (scale the loss you backpropagate)");
  if (options.max_grad_norm != 0.0) add("max_grad_norm (clip before step: clip_grad_norm)");
  if (options.grad_scaler != nullptr) add("grad_scaler (the whole step's: train_step with an "
                                          "optimizer)");
  if (!refused.empty()) {
    throw std::invalid_argument("Pipe::forward: StepOptions fields it cannot honour are set: " +
                                refused);
  }
}

}  // namespace

Pipe::Pipe(nn::Sequential module, PipeOptions options)
    : module_(std::move(module)), options_(std::move(options)), random_seed_(options_.seed) {
  verify_module(module_);
  const ScheduleSpec& spec = options_.schedule;
  verify_balance(module_, options_.balance, spec.virtual_stages);
  if (options_.chunks <= 0) {
    throw std::invalid_argument("number of chunks must be positive integer (chunks: " +
                                std::to_string(options_.chunks) + ")");
  }
  const int num_stages = static_cast<int>(options_.balance.size());
  const int num_workers = num_stages / spec.virtual_stages;
  verify_devices(options_.devices, num_workers);
  check_virtual_stages(spec.name, spec.virtual_stages);
  check_recompute_cells(spec.recompute, num_stages);

  std::vector<int> stage_worker =
      spec.stage_worker.empty()
          ? schedule_placement(spec.name, num_workers, spec.virtual_stages)
          : spec.stage_worker;
  verify_placement(stage_worker, num_stages, num_workers);
  std::vector<Device> stage_devices(num_stages);
  for (int s = 0; s < num_stages; ++s) stage_devices[s] = options_.devices[stage_worker[s]];
  std::vector<nn::Sequential> partitions = split_module(module_, options_.balance);
  verify_no_shared_parameters(partitions, stage_worker);
  tied_ = std::make_shared<const TiedParameters>(module_, options_.tied_parameters,
                                                 options_.balance);
  for (int s = 0; s < num_stages; ++s) partitions[s].to(stage_devices[s]);

  // Across processes each runs one worker, and the processes of a machine share its cores.
  int threads = options_.threads_per_worker;
  if (threads == 0 && options_.processes != nullptr) {
    threads = default_threads_per_worker(options_.processes->processes_on_this_machine());
  }
  SkipLayout skips(module_, options_.balance);
  runtime_ = std::make_shared<Runtime>(std::move(partitions), std::move(stage_devices),
                                       std::move(stage_worker), num_workers, options_.seed,
                                       threads, std::move(skips),
                                       options_.processes == nullptr ? options_.worker_cpus
                                                                    : WorkerCpus::kInherited);
  runtime_->set_processes(options_.processes);
  if (options_.deferred_batch_norm) deferred_ = std::make_unique<DeferredBatchNorm>(module_);
}

Pipe::~Pipe() = default;
Pipe::Pipe(Pipe&&) noexcept = default;
Pipe& Pipe::operator=(Pipe&&) noexcept = default;

Tensor Pipe::forward(const Tensor& input) {
  if (!input.defined()) throw std::invalid_argument("Pipe::forward: the input is undefined");
  nn::Tensors outputs = forward(nn::Tensors{input});
  if (outputs.size() != 1) {
    throw std::invalid_argument("Pipe::forward(Tensor): the model returned " +
                                std::to_string(outputs.size()) +
                                " tensors; call forward(const nn::Tensors&) for tuple outputs");
  }
  return outputs[0];
}

// GPipe forward: the F prefix of gpipe(p, m) (+ R actions per the checkpoint mode) runs now
// (looped BFS over the placement when workers hold several stages);
// the rest runs when the user's backward reaches the PipeBackward node (Note [Anatomy of a
// step] in runtime.h).
nn::Tensors Pipe::forward(const nn::Tensors& inputs, const StepOptions& options) {
  check_not_moved_from();
  if (options_.processes != nullptr) {
    throw std::invalid_argument(
        "Pipe::forward runs every stage in this process, but this Pipe's workers are spread "
        "over processes (PipeOptions::processes); use train_step");
  }
  refuse_step_only_options(options);
  const std::vector<ChunkSpec> specs = chunk_specs(options.input_chunks, inputs.size(), "input");
  MicroBatches batches = scatter(inputs, specs, options_.chunks);
  const int m = batches.count();
  const bool record = module_.is_training() && autograd::grad_mode_enabled();

  Schedule schedule = fill_drain_schedule(m);
  if (record) schedule = with_recompute(schedule, recompute_predicate(options_.schedule.recompute,
                                                                      m));
  schedule.skips = runtime().skips().edges();
  validate(schedule);
  Phases phases = split_fill_drain(schedule);

  auto step = std::make_shared<Step>(num_stages(), num_workers(), std::move(batches),
                                     record ? CellMode::kRecord : CellMode::kNoGrad,
                                     recomputed_cells(schedule));
  for (const Tensor& t : inputs) step->input_needs_grad.push_back(record && t.requires_grad());
  step->arguments = options.arguments;
  step->precision = options_.precision;
  step->device_timeline = options.device_timeline;
  step->random_key = random_key();
  if (record) ++random_step_;

  run(*step, phases.forward);

  nn::Tensors outputs = gather(step->outputs, options.output_dims);
  // Output k's dim (normalised; gather checked it exists) and each micro-batch's size on it.
  std::vector<int> output_dims(outputs.size(), 0);
  std::vector<std::vector<int64_t>> output_sizes(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int rank = static_cast<int>(outputs[k].dim());
    const int d = options.output_dims.empty() ? 0 : options.output_dims[k];
    output_dims[k] = d < 0 ? d + rank : d;
    for (const nn::Tensors& out : step->outputs) {
      output_sizes[k].push_back(out[k].size(output_dims[k]));
    }
  }
  step->outputs.clear();          // the gathered copies are what the user holds
  step->inputs.batches.clear();   // stage 0's cells keep what their backward needs
  if (!record) return outputs;

  // The output depends on the inputs and on every parameter (PipeBackward's edges).
  nn::Tensors node_inputs = inputs;
  for (const Tensor& p : module_.parameters()) node_inputs.push_back(p);
  if (!autograd::should_record(node_inputs)) return outputs;
  std::vector<size_t> recorded;
  std::vector<Tensor*> recorded_outputs;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (is_floating(outputs[k].dtype())) {
      recorded.push_back(k);
      recorded_outputs.push_back(&outputs[k]);
    }
  }
  auto node = std::make_shared<PipeBackward>(
      runtime_, std::move(step), std::move(phases.backward), describe_inputs(inputs, specs),
      std::move(output_dims), std::move(output_sizes), std::move(recorded), tied_);
  autograd::NodeRecorder::record(node, node_inputs, recorded_outputs);
  return outputs;
}

// GPipe; with several stages per worker, its breadth-first generalisation to the pipe's
// placement (looped BFS: every forward of a worker's stages in stage order, then the
// backwards in reverse), which splits into the same two phases.
Schedule Pipe::fill_drain_schedule(int m) const {
  return options_.schedule.virtual_stages == 1 ? gpipe(num_workers(), m)
                                               : looped_bfs(runtime().stage_worker(), m);
}

int Pipe::num_microbatches(int64_t rows) const {
  check_not_moved_from();
  if (rows < 1) {
    throw std::invalid_argument("Pipe::num_microbatches: rows must be >= 1, got " +
                                std::to_string(rows));
  }
  return static_cast<int>(microbatch_sizes(rows, options_.chunks).size());
}

Schedule Pipe::schedule_for(int num_microbatches) const {
  check_not_moved_from();
  return build_schedule(options_.schedule, num_workers(), num_microbatches);
}

Schedule Pipe::schedule_for(int num_microbatches, const std::string& name) const {
  check_not_moved_from();
  ScheduleSpec spec = options_.schedule;
  spec.name = name;
  check_virtual_stages(name, spec.virtual_stages);
  return build_schedule(spec, num_workers(), num_microbatches);
}

// Runs `actions` of `step` on the workers; the deferred BatchNorm statistics it gathered are
// committed once it succeeds (in training mode) and discarded when it fails.
void Pipe::run(Step& step, const std::vector<std::vector<Action>>& actions) {
  try {
    runtime().execute(step, actions);
  } catch (...) {
    if (deferred_ != nullptr) deferred_->discard();
    throw;
  }
  // Captured (Note [A step as one graph]): what follows — the commit below, clipping, the
  // optimizer — reads the step's gate, so a replay whose step failed changes nothing.
  if (step.gathered.gate.defined()) {
    if (DeviceGraph* graph = DeviceGraph::capturing_on(step.gathered.gate.device())) {
      graph->set_gate(step.gathered.gate);
    }
  }
  if (deferred_ != nullptr && module_.is_training()) deferred_->commit();
}

bool Pipe::runs_stage(int s) const {
  return options_.processes == nullptr ||
         options_.processes->runs_worker(runtime_->stage_worker()[static_cast<size_t>(s)]);
}

void Pipe::train(bool on) {
  check_not_moved_from();
  module_.train(on);
  for (int s = 0; s < num_stages(); ++s) runtime().partition(s).train(on);
}

void Pipe::check_not_moved_from() const {
  if (runtime_ == nullptr) {
    throw std::logic_error("this Pipe was moved from (std::move): use the Pipe it was moved "
                           "into");
  }
}

Runtime& Pipe::runtime() const {
  check_not_moved_from();
  return *runtime_;
}

nn::Sequential& Pipe::module() {
  check_not_moved_from();
  return module_;
}

const nn::Sequential& Pipe::module() const {
  check_not_moved_from();
  return module_;
}

const PipeOptions& Pipe::options() const {
  check_not_moved_from();
  return options_;
}

const std::vector<nn::Sequential>& Pipe::partitions() const { return runtime().partitions(); }
const std::vector<Device>& Pipe::stage_devices() const {
  return runtime().stage_devices();
}
int Pipe::num_workers() const { return runtime().num_workers(); }
int Pipe::num_stages() const { return runtime().num_stages(); }
void Pipe::manual_seed(uint64_t seed) {
  runtime().manual_seed(seed);
  random_seed_ = seed;
  random_step_ = 0;
}
Generator& Pipe::generator(int worker) { return runtime().worker(worker).generator(); }
Trace Pipe::last_trace() const { return runtime().last_trace(); }
StepCounters Pipe::last_counters() const { return runtime().last_counters(); }

std::optional<Failure> Pipe::last_failure() const { return runtime().last_failure(); }

}  // namespace pipewright::pipeline
