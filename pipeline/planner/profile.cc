// profile_model: the per-layer times and bytes of profile.h.
#include "pipeline/planner/profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "nn/skip.h"
#include "pipeline/deferred_batch_norm.h"
#include "pipeline/layer_timing.h"
#include "pipeline/median.h"
#include "pipeline/profile_state.h"
#include "pipeline/skip_layout.h"
#include "pipeline/stage_fn.h"
#include "pipeline/worker_cpus.h"
#include "tensor/matmul_precision.h"
#include "tensor/allocator.h"
#include "tensor/stream.h"
#include "tensor/threads.h"

namespace pipewright::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

double micros_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

int64_t bytes_of(const nn::Tensors& tensors) {
  int64_t total = 0;
  for (const Tensor& t : tensors) total += t.defined() ? static_cast<int64_t>(t.nbytes()) : 0;
  return total;
}

// One layer (or the loss) measured at one micro-batch size.
struct Sample {
  double forward = 0, backward = 0, backward_input = 0, backward_weight = 0;  // µs
  int64_t output = 0, message = 0, activation = 0, forward_peak = 0, backward_peak = 0,
          first_forward = 0;
  bool frees_input = false;
};

class Profiler {
 public:
  Profiler(nn::Sequential& model, const Tensor& input, const Tensor& target,
           const LossFn& loss_fn, Device device, const ProfileOptions& options)
      : model_(model), input_(input), target_(target), loss_fn_(loss_fn), device_(device),
        options_(options), allocator_(allocator_for(device)) {}

  /// Every layer and the loss at `rows` rows; .size() == layers + 1.
  std::vector<Sample> measure(int64_t rows) {
    ProfileSkipTracker skips;  // Note [Skips in the profile]
    nn::SkipTrackerGuard guard(skips);
    // The policy's working copies (made by the first forward) live until the measure's end,
    // as a stage's live until its step's end.
    autograd::PrecisionScope policy(options_.precision);
    const size_t n = model_.size();
    std::vector<Sample> samples(n + 1);
    const Tensor target = target_.slice(0, rows).to(device_);
    std::vector<ProfiledLayer> layers;  // the model's, then the loss (with the targets)
    for (size_t i = 0; i < n; ++i) {
      layers.push_back([this, i](const nn::Tensors& x) { return run_layer(i, x); });
    }
    layers.push_back([this, target](const nn::Tensors& x) {
      return nn::Tensors{loss_fn_(x.at(0), target)};
    });
    measure_memory(rows, layers, samples);
    measure_times(rows, layers, samples);
    return samples;
  }

 private:
  // Layer i as a stage's Sequential runs it: under a precision policy its outputs are
  // rounded to the 16-bit values (Note [The precision policy], autograd/precision.h).
  nn::Tensors run_layer(size_t i, const nn::Tensors& x) {
    return round_outputs(model_[i].forward(x));
  }

  nn::Tensors round_outputs(nn::Tensors y) const {
    if (options_.precision != autograd::Precision::kFloat32) {
      for (Tensor& t : y) t = autograd::round_to_precision(t);
    }
    return y;
  }

  nn::Tensors first_input(int64_t rows) const {
    return {input_.slice(0, rows).to(device_).clone()};
  }

  // Note [The memory pass]
  // The layers run as one chain, as a stage's Sequential does: layer i's output handle is
  // dropped once layer i+1 has run, so `frees_input` says whether anything kept it (layer i
  // saving its output, layer i+1 its input). Two micro-batches run, so a first forward's
  // step-long allocations (deferred BatchNorm's sums) show as first_forward. Each layer's
  // backward then runs alone on a detached copy of its input, from ones, twice: the first
  // creates the parameters' .grad, the second, measured, accumulates into them, as every
  // backward of a step but a stage's first does (the estimate adds the gradients' bytes to
  // the first: stage_estimate.cc).
  void measure_memory(int64_t rows, const std::vector<ProfiledLayer>& layers,
                      std::vector<Sample>& samples) {
    std::unique_ptr<DeferredBatchNorm> deferred;
    if (options_.deferred_batch_norm) deferred = std::make_unique<DeferredBatchNorm>(model_);
    std::vector<nn::Tensors> chain_inputs(layers.size());
    for (int pass = 0; pass < 2; ++pass) {
      const nn::Tensors input = first_input(rows);  // kept, as a cell keeps its input
      nn::Tensors x = input;
      for (size_t i = 0; i < layers.size(); ++i) {
        // The backwards' inputs come from the first pass: a handle on the second's would
        // keep its tensors alive and hide what the next layer frees.
        if (pass == 0) chain_inputs[i] = detach_like(x);
        const int64_t before = allocator_.allocated();
        allocator_.reset_peak();
        const bool model_layer = i < model_.size();
        nn::Tensors y = model_layer ? model_[i].forward(x) : layers[i](x);
        int64_t peak = allocator_.peak() - before;
        // As a Sequential: the handle on the input goes (the graph, through x, keeps what
        // the layers saved), then under a precision policy each output is rounded, the
        // input already freed if nothing kept it. `freed` is added back to what the layer
        // grew by: the estimate subtracts it where frees_input says (Note [Additive stage
        // costs], stage_estimate.cc).
        const int64_t held = allocator_.allocated();
        x = std::move(y);
        const int64_t freed = held - allocator_.allocated();
        if (model_layer) {
          allocator_.reset_peak();
          x = round_outputs(std::move(x));
          peak = std::max(peak, allocator_.peak() - before);
        }
        const int64_t grown = allocator_.allocated() - before + freed;
        Sample& s = samples[i];
        if (pass == 0) {
          s.first_forward = grown;
          continue;
        }
        s.first_forward -= grown;
        s.forward_peak = peak;
        s.output = bytes_of(x);
        s.message = message_bytes(x, options_.precision);
        s.activation = grown - s.output;
        s.frees_input = i > 0 && freed > 0;
      }
    }
    if (deferred != nullptr) deferred->discard();
    deferred.reset();  // the backwards below run plain BatchNorm: nothing accumulates
    for (size_t i = 0; i < layers.size(); ++i) {
      nn::Tensors x = chain_inputs[i];
      for (Tensor& t : x) {
        if (t.defined() && is_floating(t.dtype())) t.set_requires_grad(true);
      }
      nn::Tensors y = layers[i](x);
      nn::Tensors roots, grads;
      roots_of(y, roots, grads);
      if (roots.empty()) continue;
      const nn::Tensors inputs = requiring_grad(x);
      autograd::backward(roots, grads, inputs, {.retain_graph = true});
      const int64_t before = allocator_.allocated();
      allocator_.reset_peak();
      autograd::backward(roots, grads, inputs);
      samples[i].backward_peak = allocator_.peak() - before;
      for (Tensor p : model_params(i)) p.set_grad(Tensor());  // ProfileStateGuard restores
    }
  }

  nn::Tensors model_params(size_t i) const {
    nn::Tensors out;
    if (i >= model_.size()) return out;
    for (const Tensor& p : model_[i].parameters()) {
      if (p.requires_grad()) out.push_back(p);
    }
    return out;
  }

  // Medians of options.repetitions timed passes after options.warmup untimed ones, each
  // layer fed the previous one's output, detached, in a step's order and on a GPU repeated
  // (time_layers, pipeline/layer_timing.h: the timing balance_by_time runs too).
  void measure_times(int64_t rows, const std::vector<ProfiledLayer>& layers,
                     std::vector<Sample>& samples) {
    std::vector<nn::Tensors> parameters;
    for (size_t i = 0; i < layers.size(); ++i) parameters.push_back(model_params(i));
    const std::vector<LayerTimes> times =
        time_layers(layers, parameters, [&] { return first_input(rows); }, device_,
                    {.warmup = options_.warmup, .repetitions = options_.repetitions});
    for (size_t i = 0; i < layers.size(); ++i) {
      samples[i].forward = times[i].forward;
      samples[i].backward = times[i].backward;
      samples[i].backward_input = times[i].backward_input;
      samples[i].backward_weight = times[i].backward_weight;
    }
  }

  nn::Sequential& model_;
  Tensor input_, target_;
  LossFn loss_fn_;
  Device device_;
  const ProfileOptions& options_;
  Allocator& allocator_;
};

LayerProfile fit(const std::string& name, int64_t r1, const Sample& a, int64_t r2,
                 const Sample& b) {
  auto line = [&](double ya, double yb) { return Affine::through(r1, ya, r2, yb); };
  LayerProfile l;
  l.name = name;
  l.forward_us = line(a.forward, b.forward);
  l.backward_us = line(a.backward, b.backward);
  l.backward_input_us = line(a.backward_input, b.backward_input);
  l.backward_weight_us = line(a.backward_weight, b.backward_weight);
  l.output_bytes = line(static_cast<double>(a.output), static_cast<double>(b.output));
  l.message_bytes = line(static_cast<double>(a.message), static_cast<double>(b.message));
  l.activation_bytes = line(static_cast<double>(a.activation), static_cast<double>(b.activation));
  l.forward_peak_bytes =
      line(static_cast<double>(a.forward_peak), static_cast<double>(b.forward_peak));
  l.backward_peak_bytes =
      line(static_cast<double>(a.backward_peak), static_cast<double>(b.backward_peak));
  l.first_forward_bytes =
      line(static_cast<double>(a.first_forward), static_cast<double>(b.first_forward));
  l.frees_input = b.frees_input;
  return l;
}

}  // namespace

Device profile_device(const nn::Sequential& model, const Tensor& input) {
  std::optional<Device> device;
  for (const auto& [name, t] : model.state_dict()) {
    if (!device) device = t.device();
    if (t.device() != *device) {
      throw std::invalid_argument("profile_model: module tensor '" + name + "' is on " +
                                  t.device().str() + " but another is on " + device->str() +
                                  " (the profile runs where the parameters are)");
    }
  }
  return device.value_or(input.device());
}

namespace {

// The median microseconds of `repetitions` copies of `tensor` to `to` (after one untimed),
// each waited for: on a GPU, a pageable host copy waits for the device.
double copy_us(const Tensor& tensor, Device to, int repetitions) {
  std::vector<double> times;
  for (int k = 0; k < repetitions + 1; ++k) {
    auto t0 = Clock::now();
    Tensor copy = tensor.to(to);
    Stream::current(to).synchronize();
    if (k > 0) times.push_back(micros_between(t0, Clock::now()));
  }
  return median(times);
}

// The speed of one copy of `bytes` bytes from `device` to the next device of its kind, in
// bytes per microsecond; within `device` when it is the only one (a hand-off between stages
// on one GPU).
double copy_speed(Device device, int64_t bytes, int repetitions) {
  const Tensor block = Tensor::zeros({std::max<int64_t>(bytes / 4, 1024)}, {.device = device});
  const int count = std::max(device_count(device.type), device.index + 1);
  const Device other{device.type, (device.index + 1) % count};
  return static_cast<double>(block.nbytes()) / std::max(copy_us(block, other, repetitions), 1e-3);
}

}  // namespace

ModelProfile profile_model(nn::Sequential& model, const Tensor& input, const Tensor& target,
                           const LossFn& loss_fn, const ProfileOptions& options) {
  if (model.size() == 0) {
    throw std::invalid_argument("profile_model: the module has no layers (empty Sequential)");
  }
  if (!input.defined() || !target.defined() || input.dim() == 0 || target.dim() == 0) {
    throw std::invalid_argument("profile_model: input and target must be defined tensors with "
                                "a batch dimension");
  }
  if (input.size(0) != target.size(0)) {
    throw std::invalid_argument("profile_model: input has " + std::to_string(input.size(0)) +
                                " rows but target " + std::to_string(target.size(0)));
  }
  if (!loss_fn) throw std::invalid_argument("profile_model: loss_fn is empty");
  if (options.warmup < 0 || options.repetitions < 1) {
    throw std::invalid_argument("profile_model: warmup must be >= 0 and repetitions >= 1 "
                                "(warmup: " + std::to_string(options.warmup) +
                                ", repetitions: " + std::to_string(options.repetitions) + ")");
  }
  const int64_t batch = input.size(0);
  std::vector<int64_t> rows = options.rows;
  if (rows.empty()) rows = {std::max<int64_t>(1, batch / 16), batch};
  for (int64_t r : rows) {
    if (r < 1 || r > batch) {
      throw std::invalid_argument("profile_model: rows " + std::to_string(r) +
                                  " outside [1, " + std::to_string(batch) + "]");
    }
  }
  const int64_t r1 = *std::min_element(rows.begin(), rows.end());
  const int64_t r2 = *std::max_element(rows.begin(), rows.end());
  const Device device = profile_device(model, input);
  const int threads =
      options.threads > 0 ? options.threads : default_threads_per_worker(options.workers);

  ModelProfile profile;
  {
    ThreadBudgetGuard budget(threads);
    ProfileStateGuard state(model);
    Profiler profiler(model, input, target, loss_fn, device, options);
    const std::vector<Sample> small = profiler.measure(r1);
    const std::vector<Sample> large = r2 == r1 ? small : profiler.measure(r2);
    for (size_t i = 0; i < model.size(); ++i) {
      LayerProfile l = fit(model[i].str(), r1, small[i], r2, large[i]);
      for (const Tensor& p : model[i].parameters()) {
        if (p.requires_grad()) l.parameter_bytes += static_cast<int64_t>(p.nbytes());
      }
      for (const auto& [name, b] : model[i].named_buffers()) {
        l.buffer_bytes += static_cast<int64_t>(b.nbytes());
      }
      profile.layers.push_back(std::move(l));
    }
    profile.loss = fit("loss", r1, small.back(), r2, large.back());
    profile.loss_bytes = large.back().output;
    int64_t widest = 0;
    for (const Sample& s : large) widest = std::max(widest, s.output);
    profile.copy_bytes_per_us = copy_speed(device, widest, options.repetitions);
    // Stage 0's F copies each micro-batch from where the sample lives (a data loader's batch
    // on the host) to the device.
    profile.input_copy_us =
        Affine::through(r1, copy_us(input.slice(0, r1), device, options.repetitions), r2,
                        copy_us(input.slice(0, r2), device, options.repetitions));
  }
  profile.input_bytes_per_row = static_cast<int64_t>(input.nbytes()) / batch;
  profile.target_bytes_per_row = static_cast<int64_t>(target.nbytes()) / batch;
  profile.batch_rows = batch;
  profile.threads = threads;
  profile.fingerprint = profile_fingerprint(model, input, target, threads,
                                            options.deferred_batch_norm, options.precision);
  return profile;
}

std::string profile_fingerprint(const nn::Sequential& model, const Tensor& input,
                                const Tensor& target, int threads, bool deferred_batch_norm,
                                autograd::Precision precision) {
  return model.str() + " | input " + input.shape().str() + " " + dtype_name(input.dtype()) +
         " | target " + target.shape().str() + " " + dtype_name(target.dtype()) +
         " | threads " + std::to_string(threads) +
         (deferred_batch_norm ? " | deferred batch norm" : "") +
         (precision != autograd::Precision::kFloat32
              ? std::string(" | precision ") + autograd::precision_name(precision)
              : std::string()) +
         (float32_matmul_precision() != Float32MatmulPrecision::kHighest
              ? " | float32 matmuls " + float32_matmul_precision_name(float32_matmul_precision())
              : std::string());
}

std::vector<SkipSpan> skip_spans(const nn::Sequential& model) {
  std::vector<SkipSpan> spans;
  if (model.size() == 0) return spans;
  const SkipLayout layout(model, {static_cast<int>(model.size())});
  for (const SkipRoute& route : layout.routes()) {
    spans.push_back({static_cast<int>(route.stash_child), static_cast<int>(route.pop_child)});
  }
  return spans;
}

}  // namespace pipewright::pipeline
