// CausalSelfAttention: multi-head self-attention with a causal mask, as in GPT-2 and nanoGPT
// (Vaswani et al., "Attention Is All You Need", 2017; Radford et al., 2019).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace pipewright::nn {

/// How attention is computed: tile by tile, or through the [B, H, T, T] weights.
enum class AttentionKernel {
  kFlash,      // the default. autograd::scaled_dot_product_attention: scores, softmax and the
               // product with v tile by tile, never storing the [B, H, T, T] scores
               // (FlashAttention's algorithm). While the attention weights' dropout is active
               // (p > 0 in training) it cannot apply, and kFused runs instead.
  kFused,      // batched matmuls around autograd::causal_softmax: scale, causal mask and
               // softmax, one kernel each way; stores the scores and the weights
  kReference,  // mul(scale), masked_fill(causal_mask, -inf), softmax: the unfused ops, the
               // reference the fused paths are tested against
};

/// "flash", "fused" or "reference".
const char* attention_kernel_name(AttentionKernel kernel);
/// The kernel of that name; throws std::invalid_argument naming the value and the three names.
AttentionKernel attention_kernel_from_name(const std::string& name);

struct AttentionOptions {
  double dropout = 0.0;  // p of the attention weights' dropout and of the output's (in [0, 1))
  bool bias = true;      // biases of the qkv and output projections
  AttentionKernel kernel = AttentionKernel::kFlash;
};

/// x [B, T, C] -> [B, T, C], C = dim, H = heads, D = C / H:
///   q, k, v = split(c_attn(x))                 [B, T, 3C] -> three [B, H, T, D] (heads as a
///                                              permuted view, made contiguous once)
///   a = softmax(q·kᵀ / √D, keys j <= query i)  [B, H, T, T]   (causal: torch's is_causal;
///                                              never stored by AttentionKernel::kFlash)
///   y = c_proj(merge_heads(attn_dropout(a) · v)) , then resid_dropout(y)
/// The same function as torch.nn.functional.scaled_dot_product_attention(q, k, v,
/// is_causal=True) between nanoGPT's projections. Children, in state-dict order: "c_attn"
/// (Linear(C, 3C): q, k, v stacked), "c_proj" (Linear(C, C)), "attn_dropout", "resid_dropout"
/// (Dropout(p), drawing from the thread's current generator like nn::Dropout).
class CausalSelfAttention : public Module {
 public:
  /// Throws std::invalid_argument when dim or heads <= 0, heads does not divide dim, or the
  /// dropout p is outside [0, 1).
  CausalSelfAttention(int64_t dim, int64_t heads, AttentionOptions attention = {},
                      TensorOptions options = {});
  using Module::forward;
  /// Throws std::invalid_argument naming the shape unless x is [B, T, dim].
  Tensor forward(const Tensor& x) override;
  /// "CausalSelfAttention(dim=256, heads=4, dropout=0.1, bias=true)".
  std::string str() const override;

  int64_t dim() const { return dim_; }
  int64_t heads() const { return heads_; }
  AttentionKernel kernel() const { return options_.kernel; }
  void set_kernel(AttentionKernel kernel) { options_.kernel = kernel; }
  Linear& c_attn() const { return *c_attn_; }
  Linear& c_proj() const { return *c_proj_; }

 private:
  /// softmax(scale · q kᵀ, causal) [B, H, T, T] by the unfused or the fused-softmax kernels.
  Tensor attention_weights(const Tensor& q, const Tensor& k, double scale) const;

  int64_t dim_, heads_;
  AttentionOptions options_;
  std::shared_ptr<Linear> c_attn_, c_proj_;
  std::shared_ptr<Dropout> attn_dropout_, resid_dropout_;
};

}  // namespace pipewright::nn
