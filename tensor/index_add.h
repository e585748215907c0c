// index_add_: rows of a source added into the rows of a destination that an index names (the
// gradient of index_select, hence of an embedding lookup). Not differentiable.
#pragma once

#include "tensor/tensor.h"

namespace pipewright::ops {

/// torch.Tensor.index_add_(0, index, src): dst[index[i], ...] += src[i, ...] for every i, in
/// place. dst [N, ...] contiguous, index int64 [K], src [K, ...] with dst's trailing shape,
/// dtype (float32 / float64) and device. A row named several times receives the sum of its
/// source rows, added in index order (the same bits on every run and device).
/// Throws std::invalid_argument naming the shapes for mismatched operands or a non-contiguous
/// dst, std::out_of_range naming an index outside [0, N) (dst is then unchanged).
void index_add_(Tensor& dst, const Tensor& index, const Tensor& src);

}  // namespace pipewright::ops
