// A character-level GPT (GPT-2's architecture at nanoGPT's scale) as an nn::Sequential that a
// pipeline cuts between its blocks:
//
//   child 0        TokenPositionEmbedding   tokens [B, T] -> wte[token] + wpe[t], dropout [B, T, C]
//   children 1..L  TransformerBlock         pre-LN attention + MLP (nn/transformer.h)
//   child L+1      LayerNorm(C)             the final norm
//   child L+2      Linear(C, V, no bias)    the LM head -> logits [B, T, V], tied to wte
//
// The LM head's weight is the token embedding's matrix (Press & Wolf, "Using the Output
// Embedding to Improve Language Models", 2017). On stages of different workers each holds a
// copy, kept one parameter by PipeOptions::tied_parameters = tied_parameters(layers)
// (Note [Tied parameters]); the copy is made when the Pipe is built.
//
// Initialisation is nanoGPT's: every matrix N(0, 0.02), the residual projections (c_proj)
// N(0, 0.02 / √(2L)), biases 0, LayerNorm weights 1 — from a Generator seeded `seed`.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/module.h"
#include "nn/sequential.h"

namespace pipewright::examples {

struct GptShape {
  int64_t vocab = 0;    // V
  int64_t context = 128;  // T at most
  int64_t dim = 128;    // C
  int64_t heads = 4;
  int layers = 4;       // L
  double dropout = 0.0;  // after the embedding, and inside every block
  nn::AttentionKernel attention = nn::AttentionKernel::kFlash;  // every block's
};

/// tokens int64 [B, T] (T <= context) -> wte[tokens] + wpe[0..T) [B, T, C], then dropout.
/// Children "wte" (Embedding(V, C)), "wpe" (Embedding(context, C)), "drop" (nanoGPT's names).
class TokenPositionEmbedding : public nn::Module {
 public:
  TokenPositionEmbedding(int64_t vocab, int64_t context, int64_t dim, double dropout);
  using Module::forward;
  /// Throws std::invalid_argument naming the shape unless tokens is int64 [B, T] with
  /// 1 <= T <= context.
  Tensor forward(const Tensor& tokens) override;
  std::string str() const override;

 private:
  int64_t context_, dim_;
  std::map<Device, Tensor> positions_;  // arange(context) per GPU, made on first use
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::shared_ptr<nn::Dropout> drop_;
};

/// The model above, initialised from `seed`. Throws what its layers throw for a bad shape
/// (heads not dividing dim, ...).
nn::Sequential build_char_gpt(const GptShape& shape, uint64_t seed);

/// {{"0.wte.weight", "<L+2>.weight"}}: the embedding and the LM head, one parameter.
std::vector<std::vector<std::string>> tied_parameters(int layers);

/// Parameters of the model, the tied matrix counted once.
int64_t count_parameters(const nn::Module& model, int layers);

}  // namespace pipewright::examples
