// Scaled dot-product attention without the [L, S] scores: the tiled kernels of FlashAttention
// (Dao et al., NeurIPS 2022; FlashAttention-2, Dao 2023), written from the paper's equations.
// Not differentiable: autograd::scaled_dot_product_attention records them.
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace pipewright::ops {

/// What flash_attention returns: out [..., L, D] and lse [..., L], the log-sum-exp of each
/// query's scaled scores over the keys it sees (what the backward needs instead of the scores).
struct AttentionResult {
  Tensor out, lse;
};

/// softmax(scale · q kᵀ, keys masked) · v for q [..., L, D], k and v [..., S, D] with the same
/// leading dims (typically [B, H]), computed tile by tile (tensor/cpu/attention.cc, Note [Tiled
/// attention]) in O(L + S) memory per head instead of the scores' O(L S). causal: query i sees
/// keys j <= i (top-left aligned, torch's is_causal=True); a row that sees no key (S = 0) gives
/// out 0 and lse -inf. The same function as torch.nn.functional.scaled_dot_product_attention(
/// q, k, v, is_causal=causal, scale=scale) within float rounding.
/// Dtypes: q, k, v all float32, all float64, or all bfloat16 / all float16 (then out and lse
/// are float32: products exact, sums in float32, as a GEMM with CUBLAS_COMPUTE_32F); out and lse
/// in the inputs' dtype otherwise. On CUDA, D <= 256.
/// Throws std::invalid_argument naming the tensors when one is undefined, ranks are < 3 or
/// differ, leading dims or D differ, k and v differ in shape, dtypes or devices differ, or the
/// dtype is not one of the above (and on CUDA when D > 256).
AttentionResult flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                bool causal);

/// The gradients of flash_attention, recomputing the scores from q, k and lse; each is summed
/// in a fixed order (bitwise the same for any thread count). Returns {grad_q, grad_k, grad_v},
/// shaped as q, k, v, in out's dtype. out and lse are the forward's; grad_out is shaped as out,
/// in q's dtype (round a float32 gradient to it for 16-bit inputs, as the precision policy
/// does). Throws std::invalid_argument naming the tensors when shapes, dtypes or devices
/// disagree with the forward's.
std::vector<Tensor> flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& out, const Tensor& grad_out,
                                             const Tensor& lse, double scale, bool causal);

}  // namespace pipewright::ops
