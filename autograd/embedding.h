// Differentiable embedding lookup (torch.nn.functional.embedding).
#pragma once

#include <cstdint>
#include <optional>

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// torch.nn.functional.embedding(indices, weight, padding_idx): indices int64 [*] (any shape,
/// values in [0, num)), weight [num, dim] -> [*, dim], row indices[...] of weight.
/// Gradient (the weight's only, computed in zero-bubble's B: Note [What W takes], engine.cc):
/// dweight = zeros [num, dim] with row i of g added into row indices[i] (ops::index_add_, in
/// index order), row padding_idx left zero; a negative padding_idx counts from the end
/// (torch's convention).
/// Throws std::invalid_argument for non-int64 indices, a weight that is not 2-D or another
/// device; std::out_of_range naming an index outside [0, num) or a padding_idx outside
/// [-num, num).
Tensor embedding(const Tensor& indices, const Tensor& weight,
                 std::optional<int64_t> padding_idx = std::nullopt);

}  // namespace pipewright::autograd
