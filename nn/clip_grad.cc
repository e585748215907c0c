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

/// Σ |g|^p (or max |g| for p = inf) of one gradient.
double share_of(const Tensor& g, double p) {
  if (g.numel() == 0) return 0.0;
  if (std::isinf(p)) return ops::max(ops::abs(g).reshape(Shape{-1}), 0).item();
  if (p == 2.0) return ops::sum(ops::square(g)).item();
  if (p == 1.0) return ops::sum(ops::abs(g)).item();
  double sum = 0.0;
  for (double v : g.to_vector<double>()) sum += std::pow(std::abs(v), p);
  return sum;
}

}  // namespace

double grad_norm_share(const Tensors& params, double norm_type) {
  check_norm_type(norm_type);
  const bool inf = std::isinf(norm_type);
  double share = 0.0;
  for (const Tensor& p : params) {
    const Tensor g = p.defined() ? p.grad() : Tensor();
    if (!g.defined()) continue;
    const double s = share_of(g, norm_type);
    share = inf ? (std::isnan(s) || s > share ? s : share) : share + s;
  }
  return share;
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
