// batched_matmul: broadcast the leading dims, view both operands as stacks of matrices, one
// gemm_batched kernel call.
#include "tensor/batched_matmul.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/op_checks.h"
#include "tensor/views.h"

namespace pipewright::ops {
namespace {

std::vector<int64_t> leading_dims(const Tensor& t) {
  return {t.shape().dims().begin(), t.shape().dims().end() - 2};
}

/// t as a contiguous [Bt, rows, cols] stack: Bt = 1 when its leading dims are all 1 (the
/// kernel shares it), else `batch` matrices, expanded first when t broadcasts.
Tensor as_stack(const Tensor& t, const Shape& batch) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const Shape own(leading_dims(t));
  if (own.numel() == 1) return t.contiguous().reshape(Shape{1, rows, cols});
  if (own == batch) return t.contiguous().reshape(Shape{batch.numel(), rows, cols});
  std::vector<int64_t> full = batch.dims();
  full.push_back(rows);
  full.push_back(cols);
  return expand(t, Shape(full)).contiguous().reshape(Shape{batch.numel(), rows, cols});
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const int64_t rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(static_cast<size_t>(rank));
  for (int64_t i = 1; i <= rank; ++i) {
    const int64_t x = i <= a.rank() ? a[-i] : 1, y = i <= b.rank() ? b[-i] : 1;
    if (x != y && x != 1 && y != 1) {
      throw std::invalid_argument("cannot broadcast " + a.str() + " with " + b.str());
    }
    out[static_cast<size_t>(rank - i)] = x == 1 ? y : x;
  }
  return Shape(std::move(out));
}

Tensor batched_matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  detail::check_like("batched_matmul", a, b);
  detail::check_floating("batched_matmul", a);
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument("batched_matmul: " + why + ": " + detail::describe(a) + " · " +
                                detail::describe(b) + " (trans_a=" + (trans_a ? "true" : "false") +
                                ", trans_b=" + (trans_b ? "true" : "false") + ")");
  };
  if (a.dim() < 2 || b.dim() < 2) fail("expected operands of rank >= 2");
  const int64_t m = trans_a ? a.size(-1) : a.size(-2), k = trans_a ? a.size(-2) : a.size(-1);
  const int64_t kb = trans_b ? b.size(-1) : b.size(-2), n = trans_b ? b.size(-2) : b.size(-1);
  if (k != kb) fail("inner sizes differ (" + std::to_string(k) + " vs " + std::to_string(kb) + ")");
  Shape batch;
  try {
    batch = broadcast_shapes(Shape(leading_dims(a)), Shape(leading_dims(b)));
  } catch (const std::invalid_argument&) {
    fail("leading dims do not broadcast");
  }
  std::vector<int64_t> out_dims = batch.dims();
  out_dims.push_back(m);
  out_dims.push_back(n);
  Tensor c = Tensor::empty(Shape(out_dims), {gemm_result_dtype(a.dtype()), a.device()});
  if (c.numel() == 0 && batch.numel() == 0) return c;
  Tensor c3 = c.reshape(Shape{batch.numel(), m, n});
  PW_KERNEL(a.device(), gemm_batched)(trans_a, trans_b, 1.0, as_stack(a, batch),
                                      as_stack(b, batch), 0.0, c3);
  return c;
}

}  // namespace pipewright::ops
