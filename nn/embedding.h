// Embedding: a lookup table of learned vectors (torch.nn.Embedding).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nn/module.h"

namespace pipewright::nn {

/// weight [num_embeddings, embedding_dim]; forward maps int64 indices [*] to weight's rows
/// [*, embedding_dim] (autograd::embedding). Initialisation (torch's reset_parameters):
/// weight ~ N(0, 1) from pipewright::current_generator(), row padding_idx then zeroed; that
/// row gets no gradient. padding_idx may be negative (counts from the end, as in torch).
/// Parameter "weight".
class Embedding : public Module {
 public:
  /// Throws std::invalid_argument for num_embeddings or embedding_dim <= 0,
  /// std::out_of_range for a padding_idx outside [-num_embeddings, num_embeddings).
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<int64_t> padding_idx = std::nullopt, TensorOptions options = {});

  using Module::forward;
  /// Throws std::invalid_argument naming the dtype when indices are not int64 (and what
  /// autograd::embedding throws: std::out_of_range naming an index outside the table).
  Tensor forward(const Tensor& indices) override;
  /// "Embedding(65, 128)", "Embedding(65, 128, padding_idx=0)".
  std::string str() const override;

  int64_t num_embeddings() const { return weight_.size(0); }
  int64_t embedding_dim() const { return weight_.size(1); }
  /// Non-negative, or nullopt.
  std::optional<int64_t> padding_idx() const { return padding_idx_; }
  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_;
  std::optional<int64_t> padding_idx_;
};

}  // namespace pipewright::nn
