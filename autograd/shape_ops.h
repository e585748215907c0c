// Differentiable shape ops: reshape, flatten, dim-0 slicing (slice, chunk), cat, and moving
// a tensor to another device.
//
// Views stay views: reshape of a contiguous tensor, slice and chunk share the input's storage,
// exactly like their Tensor methods (tensor/tensor.h); only the gradient path is added.
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// Tensor::reshape (one dim may be -1). Gradient: g reshaped back to x's shape.
Tensor reshape(const Tensor& x, const Shape& shape);
/// [N, d1, d2, ...] -> [N, d1*d2*...] from start_dim on (torch.flatten(x, start_dim)).
Tensor flatten(const Tensor& x, int64_t start_dim = 1);

/// Rows [start, end) of dim 0, a view (Tensor::slice). Gradient: zeros of x's shape with g
/// written into rows [start, end). Throws std::out_of_range unless 0 <= start <= end <= size(0).
Tensor slice(const Tensor& x, int64_t start, int64_t end);
/// torch.chunk on dim 0 (Tensor::chunk: ceil(N/n) rows per chunk, never an empty chunk),
/// recorded as ONE node with one output per chunk: the gradient is assembled from the chunks'
/// gradients (zeros for chunks that got none). Throws std::invalid_argument for n <= 0.
std::vector<Tensor> chunk(const Tensor& x, int64_t n);

/// Concatenation along dim 0 (pipewright::cat; same errors). Gradient of input i: rows
/// [offset_i, offset_i + size_i(0)) of g.
Tensor cat(const std::vector<Tensor>& tensors);

/// x copied to `device` (x itself, recorded as an identity, when already there). Gradient:
/// g copied back to x's device. Lets a graph span devices.
Tensor to(const Tensor& x, Device device);

}  // namespace pipewright::autograd
