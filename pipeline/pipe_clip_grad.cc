// Pipe::clip_grad_norm and Pipe::unscale_grads: the global gradient norm, and the global
// overflow finding of loss scaling, of a model cut into stages.
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "nn/clip_grad.h"
#include "pipeline/pipe.h"
#include "pipeline/processes.h"
#include "pipeline/runtime.h"
#include "pipeline/tied_parameters.h"
#include "tensor/ops.h"

namespace pipewright::pipeline {

nn::Tensors Pipe::local_parameters() const {
  nn::Tensors local;
  for (int s = 0; s < num_stages(); ++s) {
    if (!runs_stage(s)) continue;
    const nn::Tensors stage = runtime_->partition(s).parameters();
    local.insert(local.end(), stage.begin(), stage.end());
  }
  return local;
}

namespace {
/// `params` less the extra copies of tied parameters: a tied parameter counts once in a norm
/// (Note [Tied parameters]), its first copy's gradient.
nn::Tensors counted_once(const nn::Tensors& params, const TiedParameters& tied) {
  nn::Tensors counted;
  for (const Tensor& p : params) {
    if (!tied.is_extra_copy(p)) counted.push_back(p);
  }
  return counted;
}

/// p.grad() *= factor (one element of its dtype on its device), in place when contiguous (a
/// graph's pool then holds one copy of the gradients, not one per pass over them).
void scale_grad(Tensor& p, const Tensor& factor) {
  Tensor g = p.grad();
  if (g.is_contiguous()) {
    ops::mul_(g, factor);
  } else {
    p.set_grad(ops::mul(g, factor));
  }
}

/// A float64 factor as one element of each gradient's dtype on its device, cast once per
/// (device, dtype) rather than once per gradient: the same value, a launch (or a copy and a
/// launch) fewer per parameter.
class FactorCache {
 public:
  explicit FactorCache(Tensor factor) : factor_(std::move(factor)) {}
  Tensor like(const Tensor& g) {
    for (const auto& [device, dtype, t] : cast_) {
      if (device == g.device() && dtype == g.dtype()) return t;
    }
    cast_.push_back({g.device(), g.dtype(), factor_.to(g.device()).to(g.dtype()).reshape({})});
    return std::get<2>(cast_.back());
  }

 private:
  Tensor factor_;
  std::vector<std::tuple<Device, DType, Tensor>> cast_;
};
}  // namespace

// Each process holds the gradients of the stages its workers run (in one process: all of
// them). Its share of the norm (Σ|g|^p, or max|g|) is combined over the processes of the
// pipeline, so every process gets the same total and scales its own gradients by it.
double Pipe::clip_grad_norm(double max_norm, double norm_type) {
  const nn::Tensors local = local_parameters();
  double share = nn::grad_norm_share(counted_once(local, *tied_), norm_type);
  if (options_.processes != nullptr) {
    share = options_.processes->combine_over_pipeline(share, std::isinf(norm_type));
  }
  const double norm = nn::norm_from_share(share, norm_type);
  nn::clip_grads_with_norm(local, max_norm, norm);
  return norm;
}

// Note [Clipping without a host read]
// StepOptions::max_grad_norm clips inside the whole step (train_step with an optimizer) by
// device ops alone, so a CUDA graph can hold it: per gradient Σg² in its dtype, cast to
// float64 and summed on the first stage's device (nn::grad_norm_share_on_device, the sum
// clip_grad_norm reads), norm = sqrt, coef = min(1, max_norm /
// (norm + 1e-6)) (torch's clip_coef, clamped as torch clamps it: min as -max(-a, -1), NaN
// passing through), every gradient multiplied by coef cast to its dtype (once per dtype and
// device: FactorCache). Eager and graphed whole steps run these same ops, so they agree bit
// for bit; the result may differ from clip_grad_norm's by rounding (it applies its
// coefficient as a host scalar).
void Pipe::clip_grads_on_device(double max_norm) {
  const nn::Tensors local = local_parameters();  // every stage: one process (checked)
  const Device device = home_device();
  const Tensor total = nn::grad_norm_share_on_device(counted_once(local, *tied_), 2.0, device);
  if (!total.defined()) return;
  const Tensor ratio = ops::rdiv(ops::add(ops::sqrt(total), 1e-6), max_norm);  // max_norm / x
  const Tensor minus_one = Tensor::full({1}, -1.0, {.dtype = DType::kFloat64, .device = device});
  const Tensor coef = ops::neg(ops::max(cat({ops::neg(ratio).reshape({1}), minus_one}), 0));
  FactorCache factor(coef);
  for (Tensor p : local) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    scale_grad(p, factor.like(g));
  }
}

Device Pipe::home_device() const {
  for (int s = 0; s < num_stages(); ++s) {
    if (runs_stage(s)) return runtime_->stage_devices()[static_cast<size_t>(s)];
  }
  return runtime_->stage_devices().front();
}

// Note [Loss scaling without a host read]
// StepOptions::grad_scaler runs GradScaler's unscale inside the whole step by device ops, so
// a CUDA graph can hold it: the scale S is a one-element float64 on the device (the whole
// step's own input: a replay copies this step's S in with the batch), the backward starts
// from n_j/N times S cast to the loss's dtype (pipe_train_step.cc), every gradient is then
// multiplied by 1/S (computed in float64 on the device, cast to its dtype: GradScaler::unscale
// multiplies by the same rounded value), and the finding is Σ_g Σ|g| (float64, on the home
// device) times 0: 0 when every gradient is finite, NaN otherwise (inf·0 and NaN·0 are NaN;
// a finite sum that overflows float64 counts as an overflow, as in unscale). The optimizer's
// kernels read gate + finding (DeviceGraph::set_gate), so a replay that overflowed changes
// no parameter and no optimizer state; the finding comes to the host with the step's losses
// (its one read) and tells the scaler (GradScaler::set_found_inf, update) and the slots
// whose state only a real update advances (Adam's step count: DeviceGraph::commit(false)).
// The eager whole step runs the same ops and reads the finding itself, combined over the
// pipeline's processes, before it decides to step.
Tensor Pipe::unscale_grads_on_device(const Tensor& scale) {
  const Device device = home_device();
  const Tensor inverse = ops::rdiv(scale.to(device), 1.0);  // 1/S in float64
  FactorCache factor(inverse);
  const nn::Tensors local = local_parameters();
  for (Tensor p : local) {
    if (p.grad().defined()) scale_grad(p, factor.like(p.grad()));
  }
  const Tensor total = nn::grad_norm_share_on_device(local, 1.0, device);
  return total.defined() ? ops::mul(total, 0.0)
                         : Tensor::zeros({1}, {.dtype = DType::kFloat64, .device = device});
}

// Every copy of a tied parameter holds the group's gradient (scaled alike), so each is
// unscaled; the finding is the maximum over the processes' (1 or 0).
bool Pipe::unscale_grads(nn::GradScaler& scaler) {
  const nn::Tensors local = local_parameters();
  Processes* processes = options_.processes.get();
  if (processes == nullptr) return scaler.unscale(local);
  return scaler.unscale(local, [processes](double found) {
    return processes->combine_over_pipeline(found, /*max=*/true);
  });
}

}  // namespace pipewright::pipeline
