// Gradient clipping (see clip_grad.h).
#include "nn/clip_grad.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "tensor/ops.h"

namespace pipewright::nn {
namespace {

void check_norm_type(double norm_type) {
  if (!(norm_type > 0)) {
    std::ostringstream os;
    os << "clip_grad_norm: norm_type must be > 0 (or inf), got " << norm_type;
    throw std::invalid_argument(os.str());
  }
}

/// Σ |g|^p of one gradient, for a p other than 1, 2 and inf (on the host, in float64).
double host_share(const Tensor& g, double p) {
  double sum = 0.0;
  for (double v : g.to_vector<double>()) sum += std::pow(std::abs(v), p);
  return sum;
}

}  // namespace

Tensor grad_norm_share_on_device(const Tensors& params, double norm_type, const Device& home) {
  check_norm_type(norm_type);
  const bool inf = std::isinf(norm_type);
  if (!inf && norm_type != 1.0 && norm_type != 2.0) {
    std::ostringstream os;
    os << "grad_norm_share_on_device: norm_type must be 1, 2 or inf, got " << norm_type;
    throw std::invalid_argument(os.str());
  }
  Tensor total;
  for (const Tensor& p : params) {
    const Tensor g = p.defined() ? p.grad() : Tensor();
    if (!g.defined() || g.numel() == 0) continue;
    const bool wide = g.dtype() == DType::kFloat32 || g.dtype() == DType::kFloat64;
    if (!inf && wide && g.device() == home) {  // Note [Norm shares]
      if (!total.defined()) total = Tensor::zeros({1}, {.dtype = DType::kFloat64, .device = home});
      ops::add_norm_share_(total, g, norm_type);
      continue;
    }
    const Tensor share = inf                ? ops::max(ops::abs(g).reshape(Shape{-1}), 0)
                         : norm_type == 2.0 ? ops::sum(ops::square(g))
                                            : ops::sum(ops::abs(g));
    const Tensor s = share.to(DType::kFloat64).to(home).reshape(Shape{1});
    total = !total.defined() ? s
            : inf            ? ops::max(cat({total, s}), 0).reshape(Shape{1})
                             : ops::add(total, s);
  }
  return total;
}

// Note [One read per norm]
// The gradients' shares are combined on the first gradient's device, in float64 and in the
// parameters' order (grad_norm_share_on_device), and the host reads the total once: one wait for
// the device, not one per parameter (GPT-2 on a GPU has 148, each a drained stream). Each share is
// still summed in its gradient's dtype on its device and float64 adds them in the order the host
// did, so the total has the same bits; for inf the maximum propagates NaN as before (ops::max). A
// gradient on the first one's device adds its share by ops::add_norm_share_, one pass on a GPU
// where square, sum, cast and add were four or five launches (Note [Norm shares],
// cuda_kernels/reduce.cu), the same bits. A p other than 1, 2 and inf is summed on the host, as it
// was.
double grad_norm_share(const Tensors& params, double norm_type) {
  check_norm_type(norm_type);
  if (!std::isinf(norm_type) && norm_type != 1.0 && norm_type != 2.0) {
    double share = 0.0;
    for (const Tensor& p : params) {
      const Tensor g = p.defined() ? p.grad() : Tensor();
      if (g.defined()) share += host_share(g, norm_type);
    }
    return share;
  }
  for (const Tensor& p : params) {  // home: the first gradient's device
    const Tensor g = p.defined() ? p.grad() : Tensor();
    if (g.defined() && g.numel() > 0) {
      return grad_norm_share_on_device(params, norm_type, g.device()).item();
    }
  }
  return 0.0;
}

double norm_from_share(double share, double norm_type) {
  check_norm_type(norm_type);
  if (std::isinf(norm_type)) return share;
  if (norm_type == 2.0) return std::sqrt(share);
  if (norm_type == 1.0) return share;
  return std::pow(share, 1.0 / norm_type);
}

double total_grad_norm(const Tensors& params, double norm_type) {
  return norm_from_share(grad_norm_share(params, norm_type), norm_type);
}

void clip_grads_with_norm(const Tensors& params, double max_norm, double total_norm) {
  if (!(max_norm >= 0)) {
    std::ostringstream os;
    os << "clip_grad_norm: max_norm must be >= 0, got " << max_norm;
    throw std::invalid_argument(os.str());
  }
  const double coef = max_norm / (total_norm + 1e-6);  // torch's clip_coef
  if (coef >= 1.0) return;                            // clamped to 1: nothing changes
  // A NaN coef (NaN norm) gives NaN gradients, as torch's clamp passes NaN through.
  for (Tensor p : params) {
    Tensor g = p.defined() ? p.grad() : Tensor();
    if (!g.defined()) continue;
    if (g.is_contiguous()) {
      ops::mul_(g, coef);
    } else {
      p.set_grad(ops::mul(g, coef));
    }
  }
}

double clip_grad_norm(const Tensors& params, double max_norm, double norm_type,
                      bool error_if_nonfinite) {
  const double total = total_grad_norm(params, norm_type);
  if (error_if_nonfinite && !std::isfinite(total)) {
    std::ostringstream os;
    os << "clip_grad_norm: the total norm of order " << norm_type << " of the gradients is "
       << total << " (error_if_nonfinite is set)";
    throw std::domain_error(os.str());
  }
  clip_grads_with_norm(params, max_norm, total);
  return total;
}

}  // namespace pipewright::nn
