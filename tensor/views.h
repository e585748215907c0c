// Views that reorder or repeat dimensions: transpose, permute, expand (torch's namesakes).
//
// Each returns a new tensor over the same Storage with other strides: no element is copied,
// and the result is in general not contiguous (ops make their inputs contiguous themselves;
// Tensor::contiguous() makes the copy explicitly). Not differentiable: see autograd/views.h.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace pipewright::ops {

/// torch.transpose(x, dim0, dim1): dims dim0 and dim1 swapped (negative dims count from the
/// end). Throws std::out_of_range naming a dim outside [-rank, rank).
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);

/// torch.permute(x, dims): result dim i is x's dim dims[i]. Throws std::invalid_argument
/// naming dims and x's shape unless dims is a permutation of [0, rank) (negative entries count
/// from the end).
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);

/// torch.Tensor.expand(shape): x repeated to `shape` with stride 0 along the repeated dims.
/// x's dims align with the trailing dims of `shape`; each must equal its target or be 1 (-1
/// keeps x's size); leading new dims are added. Throws std::invalid_argument naming both
/// shapes otherwise. Writing into the result would write one element many times: use it as
/// an input only.
Tensor expand(const Tensor& x, const Shape& shape);

}  // namespace pipewright::ops
