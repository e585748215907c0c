// masked_fill, tril / triu, causal_mask, causal_softmax: validate, view as the kernels' shapes,
// call the device's kernel.
#include "tensor/masking.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "tensor/kernels.h"
#include "tensor/op_checks.h"

namespace pipewright::ops {
namespace {

using detail::as_matrices;

Tensor triangle(const char* op, const Tensor& x, int64_t diagonal, bool upper) {
  const Tensor x3 = as_matrices(op, x);
  Tensor out = detail::empty_like(x3);
  if (x3.numel() > 0) PW_KERNEL(x.device(), triangular)(x3, diagonal, upper, out);
  return out.reshape(x.shape());
}

}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  detail::check_defined("masked_fill", x);
  detail::check_defined("masked_fill", mask);
  const Shape& xs = x.shape();
  const Shape& ms = mask.shape();
  const bool trailing = ms.rank() <= xs.rank() &&
                        std::equal(ms.dims().begin(), ms.dims().end(), xs.dims().end() - ms.rank());
  if (!trailing || mask.device() != x.device()) {
    throw std::invalid_argument("masked_fill: the mask must have x's shape or x's trailing dims, "
                                "on x's device: x " + detail::describe(x) + ", mask " +
                                detail::describe(mask));
  }
  const Tensor xc = x.contiguous();
  Tensor out = detail::empty_like(xc);
  if (x.numel() > 0) PW_KERNEL(x.device(), masked_fill)(xc, mask.contiguous(), value, out);
  return out;
}

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle("tril", x, diagonal, false); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle("triu", x, diagonal, true); }

Tensor causal_mask(int64_t rows, int64_t cols, TensorOptions options) {
  if (cols == -1) cols = rows;
  if (rows < 0 || cols < 0) {
    throw std::invalid_argument("causal_mask: sizes must be >= 0, got rows " +
                                std::to_string(rows) + ", cols " + std::to_string(cols));
  }
  return triu(Tensor::ones(Shape{rows, cols}, options), 1);
}

Tensor causal_softmax(const Tensor& x, double scale) {
  detail::check_floating("causal_softmax", x);
  const Tensor x3 = as_matrices("causal_softmax", x);
  Tensor out = detail::empty_like(x3);
  if (x3.numel() > 0) PW_KERNEL(x.device(), causal_softmax)(x3, scale, out);
  return out.reshape(x.shape());
}

}  // namespace pipewright::ops
