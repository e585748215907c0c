// flash_attention and its backward: validate, view as [N, L, D], call the device's kernel.
#include "tensor/attention.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/op_checks.h"

namespace pipewright::ops {
namespace {

using detail::describe;

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string(op) + ": " + what);
}

/// Checks q, k, v as flash_attention's header says.
void check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  for (const Tensor* t : {&q, &k, &v}) detail::check_defined(op, *t);
  const std::string all = "q " + describe(q) + ", k " + describe(k) + ", v " + describe(v);
  if (q.dim() < 3 || k.dim() != q.dim() || v.shape() != k.shape()) {
    fail(op, "expected q [..., L, D] and k, v [..., S, D] of one rank >= 3, got " + all);
  }
  for (int64_t d = 0; d + 2 < q.dim(); ++d) {
    if (q.size(d) != k.size(d)) fail(op, "q and k differ in a leading dim: " + all);
  }
  if (q.size(-1) != k.size(-1)) fail(op, "q and k differ in the head dim D: " + all);
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype() || q.device() != k.device() ||
      q.device() != v.device()) {
    fail(op, "q, k and v must share a dtype and a device: " + all);
  }
  if (!is_floating(q.dtype()) && !is_16_bit(q.dtype())) {
    fail(op, "expected float32, float64, bfloat16 or float16, got " + all);
  }
}

/// t as [N, L, D] (N = batch · heads), its rank checked already.
Tensor as_stack(const Tensor& t) { return detail::as_matrices("flash_attention", t); }

}  // namespace

AttentionResult flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                bool causal) {
  check_inputs("flash_attention", q, k, v);
  const TensorOptions result{gemm_result_dtype(q.dtype()), q.device()};
  const Tensor q3 = as_stack(q), k3 = as_stack(k), v3 = as_stack(v);
  Tensor out = Tensor::empty(q3.shape(), result);
  Tensor lse = Tensor::empty(Shape{q3.size(0), q3.size(1)}, result);
  if (q3.numel() > 0) {
    PW_KERNEL(q.device(), flash_attention)(q3, k3, v3, scale, causal, out, lse);
  }
  std::vector<int64_t> lse_dims(q.shape().dims().begin(), q.shape().dims().end() - 1);
  return {out.reshape(q.shape()), lse.reshape(Shape(lse_dims))};
}

std::vector<Tensor> flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& out, const Tensor& grad_out,
                                             const Tensor& lse, double scale, bool causal) {
  const char* op = "flash_attention_backward";
  check_inputs(op, q, k, v);
  for (const Tensor* t : {&out, &grad_out, &lse}) detail::check_defined(op, *t);
  const DType result = gemm_result_dtype(q.dtype());
  std::vector<int64_t> lse_dims(q.shape().dims().begin(), q.shape().dims().end() - 1);
  if (out.shape() != q.shape() || grad_out.shape() != q.shape() ||
      lse.shape() != Shape(lse_dims) || out.dtype() != result || lse.dtype() != result ||
      grad_out.dtype() != q.dtype() || out.device() != q.device() ||
      grad_out.device() != q.device() || lse.device() != q.device()) {
    fail(op, "expected out [..., L, D] and lse [..., L] in " + std::string(dtype_name(result)) +
                 " and grad_out shaped as q in q's dtype, got q " + describe(q) + ", out " +
                 describe(out) + ", grad_out " + describe(grad_out) + ", lse " + describe(lse));
  }
  const Tensor q3 = as_stack(q), k3 = as_stack(k), v3 = as_stack(v), o3 = as_stack(out),
               g3 = as_stack(grad_out);
  const Tensor lse2 = lse.contiguous().reshape(Shape{q3.size(0), q3.size(1)});
  const TensorOptions options{result, q.device()};
  // The kernel writes every element; without one (L, S or D = 0) the gradients are zeros.
  const bool run = q3.numel() > 0 && k3.numel() > 0;
  auto gradient = [&](const Shape& shape) {
    return run ? Tensor::empty(shape, options) : Tensor::zeros(shape, options);
  };
  Tensor gq = gradient(q3.shape()), gk = gradient(k3.shape()), gv = gradient(v3.shape());
  if (run) {
    PW_KERNEL(q.device(), flash_attention_backward)(q3, k3, v3, o3, g3, lse2, scale, causal, gq,
                                                    gk, gv);
  }
  return {gq.reshape(q.shape()), gk.reshape(k.shape()), gv.reshape(v.shape())};
}

}  // namespace pipewright::ops
