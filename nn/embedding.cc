// Embedding (see embedding.h).
#include "nn/embedding.h"

#include <stdexcept>

#include "autograd/embedding.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace pipewright::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim,
                     std::optional<int64_t> padding_idx, TensorOptions options) {
  if (num_embeddings <= 0 || embedding_dim <= 0) {
    throw std::invalid_argument("Embedding: num_embeddings and embedding_dim must be positive, "
                                "got " + std::to_string(num_embeddings) + " and " +
                                std::to_string(embedding_dim));
  }
  if (padding_idx) {
    if (*padding_idx < -num_embeddings || *padding_idx >= num_embeddings) {
      throw std::out_of_range("Embedding: padding_idx " + std::to_string(*padding_idx) +
                              " is outside [-" + std::to_string(num_embeddings) + ", " +
                              std::to_string(num_embeddings) + ")");
    }
    padding_idx_ = *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
  }
  weight_ = Tensor::empty(Shape{num_embeddings, embedding_dim}, options);
  current_generator().normal_(weight_, 0.0, 1.0);
  if (padding_idx_) {
    Tensor row = weight_.slice(*padding_idx_, *padding_idx_ + 1);
    ops::fill_(row, 0.0);
  }
  register_parameter("weight", weight_);
}

Tensor Embedding::forward(const Tensor& indices) {
  if (!indices.defined() || indices.dtype() != DType::kInt64) {
    throw std::invalid_argument(
        str() + ": expected int64 indices, got " +
        (indices.defined() ? indices.shape().str() + " " + dtype_name(indices.dtype())
                           : std::string("an undefined tensor")));
  }
  return autograd::embedding(indices, weight_, padding_idx_);
}

std::string Embedding::str() const {
  std::string s = "Embedding(" + std::to_string(num_embeddings()) + ", " +
                  std::to_string(embedding_dim());
  if (padding_idx_) s += ", padding_idx=" + std::to_string(*padding_idx_);
  return s + ")";
}

}  // namespace pipewright::nn
