// The GPT-2 / nanoGPT transformer block: pre-LayerNorm, causal self-attention, a GELU MLP,
// residual connections (Radford et al., 2019). One Module, so a Sequential of blocks cuts
// cleanly between blocks into pipeline stages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nn/attention.h"
#include "nn/dropout.h"
#include "nn/gelu.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/normalization.h"

namespace pipewright::nn {

/// x [*, dim] -> dropout(c_proj(gelu(c_fc(x)))) [*, dim] with c_fc Linear(dim, hidden),
/// c_proj Linear(hidden, dim). Children in state-dict order: "c_fc", "gelu", "c_proj",
/// "dropout" (nanoGPT's MLP).
class MLP : public Module {
 public:
  /// Throws std::invalid_argument for dim or hidden <= 0, a dropout p outside [0, 1) or an
  /// approximate other than "none" / "tanh".
  MLP(int64_t dim, int64_t hidden, double dropout = 0.0, bool bias = true,
      const std::string& approximate = "none", TensorOptions options = {});
  using Module::forward;
  Tensor forward(const Tensor& x) override;
  /// "MLP(dim=256, hidden=1024, dropout=0, gelu='none')".
  std::string str() const override;

 private:
  int64_t dim_, hidden_;
  std::shared_ptr<Linear> c_fc_, c_proj_;
  std::shared_ptr<GELU> gelu_;
  std::shared_ptr<Dropout> dropout_;
};

struct TransformerBlockOptions {
  double dropout = 0.0;              // attention weights, attention output and MLP output
  bool bias = true;                  // Linear and LayerNorm biases (nanoGPT's bias flag)
  double eps = 1e-5;                 // LayerNorm's
  int64_t mlp_ratio = 4;             // MLP hidden = mlp_ratio · dim
  std::string approximate = "none";  // GELU: "none" (exact, nanoGPT) or "tanh" (GPT-2)
  AttentionKernel kernel = AttentionKernel::kFlash;
};

/// x [B, T, dim] -> [B, T, dim]:
///   x = x + attn(ln_1(x))
///   x = x + mlp(ln_2(x))
/// Children in state-dict order: "ln_1" (LayerNorm), "attn" (CausalSelfAttention), "ln_2",
/// "mlp" (MLP(dim, mlp_ratio · dim)) — nanoGPT's Block, so its state dict's keys match.
class TransformerBlock : public Module {
 public:
  /// Throws std::invalid_argument as its children do (heads not dividing dim, ...) and for
  /// mlp_ratio <= 0.
  TransformerBlock(int64_t dim, int64_t heads, TransformerBlockOptions block = {},
                   TensorOptions options = {});
  using Module::forward;
  /// Throws std::invalid_argument naming the shape unless x is [B, T, dim].
  Tensor forward(const Tensor& x) override;
  /// "TransformerBlock(dim=256, heads=4, dropout=0, mlp_ratio=4)".
  std::string str() const override;

  CausalSelfAttention& attn() const { return *attn_; }

 private:
  int64_t dim_, heads_;
  TransformerBlockOptions options_;
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<MLP> mlp_;
};

}  // namespace pipewright::nn
