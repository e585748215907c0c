#include "data/dataset.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "tensor/ops.h"

namespace pipewright::data {

Dataset::Dataset(Tensor inputs, Tensor targets)
    : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  if (!inputs_.defined() || !targets_.defined()) {
    throw std::invalid_argument(std::string("Dataset: ") +
                                (inputs_.defined() ? "targets" : "inputs") + " is undefined");
  }
  if (inputs_.dim() < 1) {
    throw std::invalid_argument("Dataset: inputs must be [N, ...], got rank 0 (shape " +
                                inputs_.shape().str() + ")");
  }
  if (targets_.dim() != 1) {
    throw std::invalid_argument("Dataset: targets must be [N], got shape " +
                                targets_.shape().str());
  }
  if (inputs_.size(0) != targets_.size(0)) {
    throw std::invalid_argument("Dataset: inputs and targets have different sample counts (inputs " +
                                inputs_.shape().str() + ", targets " + targets_.shape().str() + ")");
  }
  if (inputs_.device() != targets_.device()) {
    throw std::invalid_argument("Dataset: inputs on " + inputs_.device().str() + " but targets on " +
                                targets_.device().str());
  }
}

Batch Dataset::slice(int64_t start, int64_t end) const {
  return {inputs_.slice(start, end), targets_.slice(start, end)};
}

Batch Dataset::gather(const Tensor& indices) const {
  if (!indices.defined() || indices.dtype() != DType::kInt64 || indices.dim() != 1) {
    throw std::invalid_argument(
        "Dataset::gather: indices must be an int64 [K] tensor, got " +
        (indices.defined() ? std::string(dtype_name(indices.dtype())) + " " + indices.shape().str()
                           : std::string("an undefined tensor")));
  }
  const Tensor index = indices.to(inputs_.device());
  return {ops::index_select(inputs_, index), ops::index_select(targets_, index)};
}

}  // namespace pipewright::data
