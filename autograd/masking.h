// Differentiable masking ops for attention: masked_fill and the fused causal softmax.
#pragma once

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// ops::masked_fill (torch.Tensor.masked_fill; mask of any dtype, nonzero = fill, shaped like
/// x or x's trailing dims). Gradient: g with the filled positions zeroed. The mask gets none.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

/// ops::causal_softmax: softmax over the last dim of scale · x [..., L, S] with keys j > i
/// masked (row i of each matrix), in one kernel each way. Gradient:
///   gx = scale · y ⊙ (g - Σ_j g y)   (0 at masked keys), y the output.
/// The same function as softmax(masked_fill(mul(x, scale), causal_mask, -inf)) — the unfused
/// reference the attention layer's tests compare it with.
Tensor causal_softmax(const Tensor& x, double scale = 1.0);

}  // namespace pipewright::autograd
