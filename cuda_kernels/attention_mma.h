// Tiled attention on tensor cores (attention_mma.cu): the kernels flash_attention and its
// backward (attention.cu) run for bfloat16 and float16 inputs with head dim D <= 128.
// Shapes and results are those of Kernels::flash_attention / flash_attention_backward
// (tensor/kernels.h): q [N, L, D], k and v [N, S, D] in one 16-bit dtype, out, lse, delta
// and the gradients float32.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace pipewright::cuda {

/// Whether flash_attention and its backward take the tensor-core kernels where they apply
/// (default true); false keeps every dtype on the CUDA-core kernels of attention.cu, for
/// benchmarks and tests that compare the two. Process-wide; not thread-safe against running
/// attention.
void set_attention_tensor_cores(bool on);
bool attention_tensor_cores();

/// Sets attention_tensor_cores() for its lifetime and then restores the previous value (as
/// ScopedLaunchLimits does the launch caps).
class ScopedAttentionTensorCores {
 public:
  explicit ScopedAttentionTensorCores(bool on) : previous_(attention_tensor_cores()) {
    set_attention_tensor_cores(on);
  }
  ~ScopedAttentionTensorCores() { set_attention_tensor_cores(previous_); }
  ScopedAttentionTensorCores(const ScopedAttentionTensorCores&) = delete;
  ScopedAttentionTensorCores& operator=(const ScopedAttentionTensorCores&) = delete;

 private:
  bool previous_;
};

/// Whether the tensor-core kernels take inputs of `dtype` with head dim `d`: bfloat16 or
/// float16, 1 <= d <= 128, and attention_tensor_cores().
bool tensor_core_attention_applies(DType dtype, int64_t d);

/// flash_attention for inputs where tensor_core_attention_applies: out and lse as there; the
/// probabilities are rounded to the inputs' dtype before they multiply v (FlashAttention-2,
/// Dao 2023, sec. 3.1; PyTorch's fused bf16 kernels do the same), so each element of out
/// differs from the exact attention of the inputs by at most u · Σ_j p_j |v_j| <= u · max |v|
/// (unit roundoff u = 2^-8 for bfloat16, 2^-11 for float16) plus float32 rounding.
void flash_attention_mma(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                         bool causal, Tensor& out, Tensor& lse);

/// flash_attention_backward's gradients for those inputs, given delta [N, L] (Σ_d grad_out ·
/// out per row). The probabilities and the score gradients are rounded to the inputs' dtype
/// before their products (as in the forward): each gradient within u · Σ |term| of its sum's
/// terms (tests/cuda/transformer_ops_test checks it against float64).
void flash_attention_backward_mma(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& grad_out, const Tensor& lse, const Tensor& delta,
                                  double scale, bool causal, Tensor& grad_q, Tensor& grad_k,
                                  Tensor& grad_v);

}  // namespace pipewright::cuda
