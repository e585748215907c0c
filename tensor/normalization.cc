// layer_norm, rms_norm, norm_backward: check, view x as [rows, C], call the fused kernels.
#include "tensor/normalization.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/op_checks.h"

namespace pipewright::ops {
namespace {

void check_affine(const char* op, const Tensor& x, const Tensor& p, const char* what) {
  if (!p.defined()) return;
  detail::check_like(op, x, p);
  if (p.dim() != 1 || p.size(0) != x.size(-1)) {
    throw std::invalid_argument(std::string(op) + ": " + what + " has shape " + p.shape().str() +
                                ", expected [" + std::to_string(x.size(-1)) +
                                "] for input " + detail::describe(x));
  }
}

/// x's shape without its last dim: the shape of the per-row statistics.
Shape rows_shape(const Tensor& x) {
  return Shape(std::vector<int64_t>(x.shape().dims().begin(), x.shape().dims().end() - 1));
}

/// x contiguous as [rows, C].
Tensor as_rows(const Tensor& x) {
  const int64_t cols = x.size(-1);
  return x.contiguous().reshape(Shape{cols == 0 ? 0 : x.numel() / cols, cols});
}

NormForward normalize(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                      double eps, bool rms) {
  detail::check_floating(op, x);
  if (x.dim() == 0) throw std::invalid_argument(std::string(op) + ": expected rank >= 1, got " +
                                                detail::describe(x));
  check_affine(op, x, weight, "weight");
  check_affine(op, x, bias, "bias");
  const Tensor x2 = as_rows(x);
  const TensorOptions like{x.dtype(), x.device()};
  NormForward f{Tensor::empty(x2.shape(), like),
                rms ? Tensor() : Tensor::empty(Shape{x2.size(0)}, like),
                Tensor::empty(Shape{x2.size(0)}, like)};
  if (x.numel() > 0) {
    PW_KERNEL(x.device(), layer_norm)(x2, weight.defined() ? weight.contiguous() : Tensor(),
                                      bias.defined() ? bias.contiguous() : Tensor(), eps, rms,
                                      f.y, f.mean, f.rstd);
  }
  const Shape stats = rows_shape(x);
  return {f.y.reshape(x.shape()), rms ? Tensor() : f.mean.reshape(stats), f.rstd.reshape(stats)};
}

}  // namespace

NormForward layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return normalize("layer_norm", x, weight, bias, eps, false);
}

NormForward rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  return normalize("rms_norm", x, weight, Tensor(), eps, true);
}

NormGrads norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight,
                        const NormForward& forward, bool rms, bool want_x, bool want_weight,
                        bool want_bias) {
  const char* op = rms ? "rms_norm_backward" : "layer_norm_backward";
  detail::check_like(op, grad_y, x);
  detail::check_same_shape(op, grad_y, x);
  check_affine(op, x, weight, "weight");
  const int64_t cols = x.size(-1);
  const TensorOptions like{x.dtype(), x.device()};
  const Tensor g2 = as_rows(grad_y), x2 = as_rows(x);
  NormGrads grads{want_x ? Tensor::empty(x2.shape(), like) : Tensor(),
                  want_weight ? Tensor::empty(Shape{cols}, like) : Tensor(),
                  want_bias && !rms ? Tensor::empty(Shape{cols}, like) : Tensor()};
  const int64_t rows = x2.size(0);
  PW_KERNEL(x.device(), layer_norm_backward)(
      g2, x2, weight.defined() ? weight.contiguous() : Tensor(),
      rms ? Tensor() : forward.mean.contiguous().reshape(Shape{rows}),
      forward.rstd.contiguous().reshape(Shape{rows}), rms, grads.x, grads.weight, grads.bias);
  if (grads.x.defined()) grads.x = grads.x.reshape(x.shape());
  return grads;
}

}  // namespace pipewright::ops
