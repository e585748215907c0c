// Differentiable scaled dot-product attention, computed tile by tile (tensor/attention.h).
#pragma once

#include <optional>

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
/// without dropout or an attention mask: softmax(scale · q kᵀ, causal) · v for q [..., L, D],
/// k, v [..., S, D], scale 1/√D by default, through ops::flash_attention, so neither pass
/// stores the [..., L, S] scores (Note [Tiled attention], tensor/cpu/attention.cc). Saves q, k,
/// v, the output and each row's log-sum-exp; the backward recomputes the scores from them
/// (ops::flash_attention_backward).
/// Under a 16-bit Precision (autograd/precision.h) q, k and v enter as 16-bit operands like a
/// batched matmul's, the output and the gradients are float32, and the incoming gradient is
/// rounded to the 16-bit dtype (Note [The precision policy]).
/// Dtypes, shapes and errors: ops::flash_attention's (std::invalid_argument naming the tensors).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal = true, std::optional<double> scale = {});

}  // namespace pipewright::autograd
