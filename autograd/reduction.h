// Differentiable reductions: sum and mean, over all elements or over one dimension.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// Σ / mean over all elements -> rank-0 tensor. Gradient: g (÷ numel for mean) repeated to
/// x's shape.
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);

/// Σ / mean over `dim` (negative counts from the end); keepdim keeps it as size 1 (torch.sum
/// (x, dim, keepdim)). Gradient: g (÷ size(dim) for mean) repeated along `dim`.
/// Throws std::out_of_range for a bad dim.
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace pipewright::autograd
