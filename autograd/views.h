// Differentiable transpose, permute and contiguous (views of tensor/views.h, plus the copy that
// makes a view contiguous).
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// ops::transpose (a view, torch.transpose). Gradient: g transposed back, made contiguous.
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);

/// ops::permute (a view, torch.permute). Gradient: g permuted by the inverse permutation,
/// made contiguous.
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);

/// torch.Tensor.contiguous(): x itself (a new handle, recorded as an identity) when already
/// contiguous, else a contiguous copy. Gradient: g. Tensor::contiguous() would drop the
/// history; this keeps it.
Tensor contiguous(const Tensor& x);

}  // namespace pipewright::autograd
