// Helpers of function_node.h.
#include "autograd/function_node.h"

#include <vector>

#include "tensor/ops.h"

namespace pipewright::autograd {

Tensor own_handle(const Tensor& out, const Tensor& in) {
  if (!out.is_same(in)) return out;
  const TensorImpl& src = *out.impl();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = src.storage;
  impl->shape = src.shape;
  impl->strides = src.strides;
  impl->offset = src.offset;
  impl->dtype = src.dtype;
  return Tensor(std::move(impl));
}

Tensor reduce_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t n = shape.numel();
  return ops::sum(g.reshape(Shape{g.numel() / n, n}), 0).reshape(shape);
}

Tensor expand_along(const Tensor& g, const Shape& shape, int64_t dim) {
  dim = shape.wrap_dim(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (int64_t d = dim + 1; d < shape.rank(); ++d) inner *= shape[d];
  const int64_t n = shape[dim];
  if (outer == 1) {
    // g is [inner]: broadcasting against zeros [n, inner] repeats it n times.
    Tensor zeros = Tensor::zeros(Shape{n, inner}, options_of(g));
    return ops::add(zeros, g.reshape(Shape{inner})).reshape(shape);
  }
  // Row o*n + k of the result is row o of g viewed as [outer, inner]: an index_select.
  std::vector<int64_t> rows(static_cast<size_t>(outer * n));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < n; ++k) rows[static_cast<size_t>(o * n + k)] = o;
  }
  Tensor index = Tensor::from_vector(rows, g.device());
  return ops::index_select(g.reshape(Shape{outer, inner}), index).reshape(shape);
}

Tensor as_rows(const Tensor& t) {
  const int64_t last = t.size(-1);
  return t.contiguous().reshape(Shape{last == 0 ? 0 : t.numel() / last, last});
}

}  // namespace pipewright::autograd
