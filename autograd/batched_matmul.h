// Differentiable batched matrix product (ops::batched_matmul: torch.matmul on operands of
// rank >= 2, leading dims broadcast, optional transposes of the last two dims).
#pragma once

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// op(a) [..., M, K] · op(b) [..., K, N] -> [..., M, N] (ops::batched_matmul: semantics,
/// broadcasting and errors). Gradients, per matrix (C = op(a)·op(b), G = dC):
///   d op(a) = G · op(b)ᵀ,  d op(b) = op(a)ᵀ · G,
/// each a batched product with the transposes folded in, summed over the leading dims an
/// operand was broadcast along (torch's rule).
Tensor batched_matmul(const Tensor& a, const Tensor& b, bool trans_a = false,
                      bool trans_b = false);

/// Sums g over the dims along which a tensor of `shape` was broadcast to g's shape (leading
/// dims g has beyond shape's rank, and dims where shape has 1 and g more): the gradient of a
/// broadcast. Throws std::invalid_argument when shape does not broadcast to g's shape.
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

}  // namespace pipewright::autograd
