// Pipe::train_step with an optimizer: the whole step, eagerly or as a replayed CUDA graph
// (Note [A step as one graph], step_graph.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "nn/optimizer.h"
#include "pipeline/pipe.h"
#include "pipeline/processes.h"
#include "pipeline/runtime.h"
#include "pipeline/step_graph.h"
#include "pipeline/step_readback.h"
#include "tensor/ops.h"

namespace pipewright::pipeline {

void StepGraph::say_once(const std::string& message) {
  for (const std::string& said : said_) {
    if (said == message) return;
  }
  said_.push_back(message);
  std::fprintf(stderr, "pipewright: cuda_graphs: %s\n", message.c_str());
}

void StepGraph::reset(Key new_key) {
  graph.reset();  // first: its pool's blocks return while the tensors below still hold theirs
  step.reset();
  result = StepResult();
  inputs.clear();
  targets.clear();
  loss_scale = Tensor();
  update_gate = Tensor();
  key = std::move(new_key);
  ran_eagerly = false;
  stays_eager = false;
}

namespace {

/// Whether the whole step scales its loss (StepOptions::grad_scaler, enabled).
bool scaling(const StepOptions& options) {
  return options.grad_scaler != nullptr && options.grad_scaler->enabled();
}

StepGraph::Key make_key(const nn::Tensors& inputs, const nn::Tensors& targets,
                        const nn::Sequential& module, nn::Optimizer& optimizer,
                        const StepOptions& options) {
  StepGraph::Key key;
  for (const nn::Tensors* list : {&inputs, &targets}) {
    for (const Tensor& t : *list) {
      key.shapes.push_back(t.defined() ? t.shape().dims() : std::vector<int64_t>{-1});
      key.dtypes.push_back(t.defined() ? static_cast<int>(t.dtype()) : -1);
      key.devices.push_back(t.defined() ? t.device() : Device::cpu());
    }
  }
  for (const auto& [name, t] : module.state_dict()) key.addresses.push_back(t.raw_data());
  for (const void* address : optimizer.state_addresses()) key.addresses.push_back(address);
  key.optimizer = &optimizer;
  key.reduction = static_cast<int>(options.reduction);
  key.loss_scale = options.loss_scale;
  key.max_grad_norm = options.max_grad_norm;
  key.loss_scaling = scaling(options);
  key.first_sample = options.first_sample;
  key.training = module.is_training();
  return key;
}

}  // namespace

StepResult Pipe::train_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn,
                            nn::Optimizer& optimizer, const StepOptions& options) {
  if (!input.defined() || !target.defined()) {
    throw std::invalid_argument("train_step: input and target must be defined");
  }
  return train_step(nn::Tensors{input}, nn::Tensors{target}, as_tuple_loss(loss_fn), optimizer,
                    options);
}

namespace {
/// The options a plain train_step gets: clipping and loss scaling are the whole step's.
StepOptions plain_options(const StepOptions& options) {
  StepOptions plain = options;
  plain.max_grad_norm = 0.0;
  plain.grad_scaler = nullptr;
  return plain;
}
}  // namespace

StepResult Pipe::eager_step(const nn::Tensors& inputs, const nn::Tensors& targets,
                            const TupleLossFn& loss_fn, nn::Optimizer& optimizer,
                            const StepOptions& options) {
  optimizer.zero_grad();
  if (!scaling(options)) {
    StepResult result = train_step(inputs, targets, loss_fn, plain_options(options));
    if (options.max_grad_norm > 0) clip_grads_on_device(options.max_grad_norm);
    step(optimizer);
    return result;
  }
  // Note [Loss scaling without a host read] (pipe_clip_grad.cc): the ops a graph captures,
  // with the finding read here, before the decision.
  nn::GradScaler& scaler = *options.grad_scaler;
  const Tensor scale = Tensor::full({1}, scaler.scale(),
                                    {.dtype = DType::kFloat64, .device = home_device()});
  StepResult result = run_step(inputs, targets, loss_fn, plain_options(options), true,
                               nullptr, scale);
  double found = unscale_grads_on_device(scale).item() == 0.0 ? 0.0 : 1.0;
  if (options_.processes != nullptr) {
    found = options_.processes->combine_over_pipeline(found, /*max=*/true);
  }
  if (options.max_grad_norm > 0) clip_grads_on_device(options.max_grad_norm);
  result.skipped = found != 0.0;
  if (!result.skipped) step(optimizer);
  scaler.set_found_inf(result.skipped);
  scaler.update();
  return result;
}

std::string Pipe::why_not_graphed(const nn::Tensors& inputs, const nn::Optimizer& optimizer,
                                  const StepOptions& options) const {
  for (const Device& d : runtime().stage_devices()) {
    if (!d.is_cuda()) return "the stages are not all on CUDA devices: steps run eagerly";
  }
  if (options_.processes != nullptr) return "a Pipe over processes: steps run eagerly";
  if (!optimizer.capturable()) {
    return std::string(optimizer.name()) + " cannot be captured yet (Adam, AdamW and SGD can): "
           "steps run eagerly";
  }
  if (options.return_outputs || !options.arguments.empty() || options.schedule.has_value() ||
      options.device_timeline) {
    return "a step with return_outputs, arguments, its own schedule or a device timeline runs "
           "eagerly";
  }
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) {
      return "an input that requires grad: steps run eagerly";
    }
  }
  return "";
}

StepResult Pipe::train_step(const nn::Tensors& inputs, const nn::Tensors& targets,
                            const TupleLossFn& loss_fn, nn::Optimizer& optimizer,
                            const StepOptions& options) {
  check_not_moved_from();
  if (!(options.max_grad_norm >= 0) || std::isinf(options.max_grad_norm)) {
    throw std::invalid_argument("train_step: StepOptions::max_grad_norm must be >= 0 and "
                                "finite, got " + std::to_string(options.max_grad_norm));
  }
  if (options.grad_scaler != nullptr && options.loss_scale != 1.0) {
    throw std::invalid_argument("train_step: StepOptions::grad_scaler scales the loss itself; "
                                "leave loss_scale 1 (got " + std::to_string(options.loss_scale) +
                                ")");
  }
  if (options.max_grad_norm > 0 && options_.processes != nullptr) {
    throw std::invalid_argument("train_step: StepOptions::max_grad_norm clips within one "
                                "process; across processes use Pipe::clip_grad_norm between "
                                "train_step and step");
  }
  if (!options_.cuda_graphs) return eager_step(inputs, targets, loss_fn, optimizer, options);
  if (graph_ == nullptr) graph_ = std::make_unique<StepGraph>();
  const std::string why_not = why_not_graphed(inputs, optimizer, options);
  if (!why_not.empty()) {
    graph_->say_once(why_not);
    if (graph_->graph != nullptr) graph_->reset({});
    return eager_step(inputs, targets, loss_fn, optimizer, options);
  }
  StepGraph::Key key = make_key(inputs, targets, module(), optimizer, options);
  if (!graph_->key.has_value() || !(*graph_->key == key)) {
    if (graph_->graph != nullptr) {
      graph_->say_once("a step of another kind (shapes, options, optimizer, or tensors "
                       "replaced): it runs eagerly, the next one of its kind is captured");
    }
    graph_->reset(std::move(key));
  }
  if (graph_->stays_eager) return eager_step(inputs, targets, loss_fn, optimizer, options);
  if (!graph_->ran_eagerly) {
    StepResult result = eager_step(inputs, targets, loss_fn, optimizer, options);
    graph_->ran_eagerly = true;
    // The step may have made tensors (the optimizer's state): the next step's kind is what
    // this one left behind.
    graph_->key = make_key(inputs, targets, module(), optimizer, options);
    return result;
  }
  if (graph_->graph == nullptr) return capture_step(inputs, targets, loss_fn, optimizer, options);
  return replay_step(inputs, targets, options.grad_scaler);
}

StepResult Pipe::capture_step(const nn::Tensors& inputs, const nn::Tensors& targets,
                              const TupleLossFn& loss_fn, nn::Optimizer& optimizer,
                              const StepOptions& options) {
  // The stages' devices, the first stage's first (Note [A step over devices], step_graph.h).
  std::vector<Device> devices;
  for (const Device& d : runtime().stage_devices()) {
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  }
  const Device device = devices.front();
  StepGraph& g = *graph_;
  if (!g.stream.has_value()) g.stream = Stream::create(device);
  auto graph = std::make_unique<DeviceGraph>(devices);
  // The graph's own inputs and targets (Note [Staged inputs], tensor/graph.h): every launch,
  // this first one included, fills them from the step's tensors.
  std::vector<std::pair<Shape, DType>> specs;
  for (const nn::Tensors* list : {&inputs, &targets}) {
    for (const Tensor& t : *list) {
      if (t.defined()) specs.emplace_back(t.shape(), t.dtype());
    }
  }
  const bool scaled = scaling(options);
  if (scaled) specs.emplace_back(Shape({1}), DType::kFloat64);  // the loss scale, last
  const std::vector<Tensor> staged = graph->stage_inputs(specs);
  size_t next = 0;
  for (const Tensor& t : inputs) g.inputs.push_back(t.defined() ? staged[next++] : Tensor());
  for (const Tensor& t : targets) g.targets.push_back(t.defined() ? staged[next++] : Tensor());
  if (scaled) g.loss_scale = staged[next++];
  const uint64_t random_step = random_step_;
  std::shared_ptr<Step> step;
  StepResult result;
  try {
    // Before the capture: the gradients it drops were the eager step's, which no captured
    // kernel reads, so their blocks go back to the cache instead of joining the graph's pool
    // (Note [Graph pools]); every replay makes the gradients anew, as after a zero_grad.
    optimizer.zero_grad();
    StreamGuard on_capture_stream(*g.stream);
    graph->begin_capture(*g.stream);
    std::vector<std::unique_ptr<StreamGuard>> on_forked_streams;  // the other devices'
    for (size_t k = 1; k < devices.size(); ++k) {
      on_forked_streams.push_back(std::make_unique<StreamGuard>(graph->stream_of(devices[k])));
    }
    try {
      result = run_step(g.inputs, g.targets, loss_fn, plain_options(options), true, &step,
                        g.loss_scale);
      if (scaled) {
        // Note [Loss scaling without a host read]: the updates read the step's gate plus the
        // finding; the finding is read with the losses.
        const Tensor finding = unscale_grads_on_device(g.loss_scale);
        add_overflow_finding(step->gathered, finding);
        const Tensor& gate = step->gathered.gate;
        g.update_gate = gate.defined() ? ops::add(gate, finding.to(gate.device())) : finding;
        graph->set_gate(g.update_gate);
      }
      if (options.max_grad_norm > 0) clip_grads_on_device(options.max_grad_norm);
      this->step(optimizer);
      gather_on(step->gathered, device);  // the replay's one read, on the launch's stream
      graph->end_capture();
    } catch (...) {
      graph->abandon_capture();
      throw;
    }
  } catch (const std::exception& e) {
    random_step_ = random_step;
    graph.reset();
    g.reset(*g.key);
    g.stays_eager = true;  // this kind is not tried again
    g.say_once(std::string("a step could not be captured (") + e.what() +
               "): steps of its kind run eagerly");
    return eager_step(inputs, targets, loss_fn, optimizer, options);
  }
  random_step_ = random_step;  // each launch advances it, this first one included
  ++g.captures;
  g.graph = std::move(graph);
  g.step = std::move(step);
  g.result = std::move(result);
  return replay_step(inputs, targets, options.grad_scaler);
}

StepResult Pipe::replay_step(const nn::Tensors& inputs, const nn::Tensors& targets,
                             nn::GradScaler* scaler) {
  StepGraph& g = *graph_;
  const Device device = g.graph->device();
  std::vector<Tensor> sources;
  for (const nn::Tensors* list : {&inputs, &targets}) {
    for (const Tensor& t : *list) {
      if (t.defined()) sources.push_back(t);
    }
  }
  if (g.loss_scale.defined()) {  // this step's scale (Note [Loss scaling without a host read])
    sources.push_back(Tensor::full({1}, scaler->scale(), {.dtype = DType::kFloat64}));
  }
  g.graph->replay(Stream::current(device), sources);  // on the caller's stream
  Step& step = *g.step;
  read_step_values(step, step.gathered);  // the step's one wait
  if (std::exception_ptr error = step.error()) {
    // The step ran, as a failed eager step does (its key's step advances); its gate kept the
    // parameters, BatchNorm's statistics and the optimizer's state as they were. The captured
    // step now carries the failure: start over.
    ++random_step_;
    g.reset(*g.key);
    std::rethrow_exception(error);
  }
  StepResult result;
  result.skipped = g.loss_scale.defined() && step.found_inf;
  g.graph->commit(/*updated=*/!result.skipped);
  if (g.loss_scale.defined()) {
    scaler->set_found_inf(result.skipped);
    scaler->update();
  }
  ++random_step_;
  ++g.replays;
  result.microbatch_sizes = g.result.microbatch_sizes;
  result.microbatch_losses = step.losses;
  for (int j = 0; j < step.num_microbatches; ++j) {
    result.loss += step.loss->scale(j) * step.losses[static_cast<size_t>(j)];
  }
  result.schedule = g.result.schedule;
  result.counters = g.result.counters;
  return result;
}

int64_t Pipe::graph_pool_bytes() const {
  return graph_ != nullptr && graph_->graph != nullptr ? graph_->graph->pool_bytes() : 0;
}

int64_t Pipe::graph_replays() const { return graph_ != nullptr ? graph_->replays : 0; }

int64_t Pipe::graph_captures() const { return graph_ != nullptr ? graph_->captures : 0; }

}  // namespace pipewright::pipeline
