// Masks for attention: masked_fill, tril / triu, the causal mask, and the causal softmax that
// fuses scaling, masking and softmax. Not differentiable: see autograd/masking.h.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace pipewright::ops {

/// torch.Tensor.masked_fill(mask, value): x with `value` wherever mask is nonzero. pipewright
/// has no bool dtype, so mask may have any dtype (nonzero = true); its shape equals x's or
/// x's trailing dims (a [T, T] mask for [B, H, T, T] scores; torch broadcasts more generally).
/// Throws std::invalid_argument naming both shapes otherwise, or when the devices differ.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

/// torch.tril / torch.triu on the last two dims of x (rank >= 2, any leading dims): elements
/// with j - i > diagonal (tril) or j - i < diagonal (triu) are set to 0. Any dtype.
/// Throws std::invalid_argument for rank < 2.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

/// The causal mask of `rows` queries over `cols` keys: [rows, cols], 1 where key j comes after
/// query i (j > i: the positions causal attention hides), 0 elsewhere, in options' dtype —
/// triu(ones, 1), the complement of torch's tril(ones(L, S)) used by
/// scaled_dot_product_attention(is_causal=True). cols = -1: square. Throws
/// std::invalid_argument for a negative size.
Tensor causal_mask(int64_t rows, int64_t cols = -1, TensorOptions options = {});

/// softmax(masked_fill(scale · x, causal_mask, -inf)) over the last dim, in one kernel: x
/// [..., L, S] (rank >= 2; scores of L queries over S keys), row i normalised over keys
/// j <= i, 0 at j > i. Equal to the three ops within float rounding; the attention layer's
/// fast path (autograd::causal_softmax). Float32 / float64; throws std::invalid_argument for
/// rank < 2 or another dtype.
Tensor causal_softmax(const Tensor& x, double scale = 1.0);

}  // namespace pipewright::ops
