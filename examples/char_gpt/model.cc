#include "examples/char_gpt/model.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "autograd/elementwise.h"
#include "autograd/grad_mode.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "nn/transformer.h"
#include "tensor/generator.h"

namespace pipewright::examples {

TokenPositionEmbedding::TokenPositionEmbedding(int64_t vocab, int64_t context, int64_t dim,
                                               double dropout)
    : context_(context), dim_(dim) {
  wte_ = register_module("wte", std::make_shared<nn::Embedding>(vocab, dim));
  wpe_ = register_module("wpe", std::make_shared<nn::Embedding>(context, dim));
  drop_ = register_module("drop", std::make_shared<nn::Dropout>(dropout));
}

Tensor TokenPositionEmbedding::forward(const Tensor& tokens) {
  if (tokens.dim() != 2 || tokens.dtype() != DType::kInt64 || tokens.size(1) < 1 ||
      tokens.size(1) > context_) {
    throw std::invalid_argument("TokenPositionEmbedding: tokens have shape " +
                                tokens.shape().str() + " (" + dtype_name(tokens.dtype()) +
                                "), expected int64 [B, T] with 1 <= T <= " +
                                std::to_string(context_));
  }
  // On a GPU, 0 .. context-1 are made once per device and the first T used: arange fills on
  // the host, and a copy from the host every forward is one a graph capture cannot hold. On
  // the CPU they are made each forward (no copy; the step's memory stays what the planner
  // measures).
  const TensorOptions options{.dtype = DType::kInt64, .device = tokens.device()};
  Tensor positions;
  if (tokens.device().is_cpu()) {
    positions = Tensor::arange(tokens.size(1), options);
  } else {
    Tensor& all = positions_[tokens.device()];
    if (!all.defined()) all = Tensor::arange(context_, options);
    positions = all.slice(0, tokens.size(1));
  }
  return drop_->forward(autograd::add(wte_->forward(tokens), wpe_->forward(positions)));
}

std::string TokenPositionEmbedding::str() const {
  std::ostringstream os;
  os << "TokenPositionEmbedding(vocab=" << wte_->num_embeddings() << ", context=" << context_
     << ", dim=" << dim_ << ", dropout=" << drop_->p() << ")";
  return os.str();
}

nn::Sequential build_char_gpt(const GptShape& shape, uint64_t seed) {
  Generator init(seed);
  GeneratorGuard guard(init);
  nn::Sequential model;
  model.push_back(TokenPositionEmbedding(shape.vocab, shape.context, shape.dim, shape.dropout));
  for (int l = 0; l < shape.layers; ++l) {
    model.push_back(nn::TransformerBlock(shape.dim, shape.heads,
                                         {.dropout = shape.dropout, .kernel = shape.attention}));
  }
  model.push_back(nn::LayerNorm(shape.dim));
  model.push_back(nn::Linear(shape.dim, shape.vocab, /*bias=*/false));
  // nanoGPT's _init_weights and its scaled residual projections.
  autograd::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * shape.layers);
  for (auto& [name, p] : model.named_parameters()) {
    Tensor t = p;
    const bool bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (bias) {
      t.copy_from(Tensor::zeros(t.shape(), {.dtype = t.dtype()}));
    } else if (t.dim() >= 2) {
      const bool residual = name.find("c_proj.weight") != std::string::npos;
      init.normal_(t, 0.0, residual ? residual_std : 0.02);
    }
  }
  return model;
}

std::vector<std::vector<std::string>> tied_parameters(int layers) {
  return {{"0.wte.weight", std::to_string(layers + 2) + ".weight"}};
}

int64_t count_parameters(const nn::Module& model, int layers) {
  const std::string head = std::to_string(layers + 2) + ".weight";
  int64_t n = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    if (name != head) n += p.numel();
  }
  return n;
}

}  // namespace pipewright::examples
