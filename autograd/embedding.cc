// embedding: index_select forward, index_add_ backward.
#include "autograd/embedding.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/function_node.h"
#include "tensor/index_add.h"
#include "tensor/ops.h"

namespace pipewright::autograd {
namespace {

class EmbeddingBackward final : public FunctionNode {
 public:
  EmbeddingBackward(const Tensor& indices, const Shape& weight_shape,
                    std::optional<int64_t> padding_idx)
      : FunctionNode({indices}), weight_shape_(weight_shape), padding_idx_(padding_idx) {}
  const char* name() const override { return "EmbeddingBackward"; }
  /// Its parameter gradients are computed in B (Note [What W takes], engine.cc).
  bool defers_weight_grads() const override { return false; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    const Tensor& g = grads[0];
    const int64_t dim = weight_shape_[1];
    Tensor gw = Tensor::zeros(weight_shape_, options_of(g));
    ops::index_add_(gw, saved(0).reshape(Shape{-1}), g.contiguous().reshape(Shape{-1, dim}));
    if (padding_idx_) {
      Tensor row = gw.slice(*padding_idx_, *padding_idx_ + 1);
      ops::fill_(row, 0.0);
    }
    return {gw};
  }

 private:
  Shape weight_shape_;
  std::optional<int64_t> padding_idx_;
};

}  // namespace

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  if (!indices.defined() || !weight.defined() || indices.dtype() != DType::kInt64 ||
      weight.dim() != 2 || indices.device() != weight.device()) {
    auto describe = [](const Tensor& t) {
      return t.defined() ? t.shape().str() + " " + dtype_name(t.dtype()) + " on " +
                               t.device().str()
                         : std::string("undefined");
    };
    throw std::invalid_argument("embedding: expected int64 indices and a 2-D weight [num, dim] "
                                "on one device, got indices " + describe(indices) +
                                ", weight " + describe(weight));
  }
  const int64_t num = weight.size(0);
  if (padding_idx && (*padding_idx < -num || *padding_idx >= num)) {
    throw std::out_of_range("embedding: padding_idx " + std::to_string(*padding_idx) +
                            " is outside [-" + std::to_string(num) + ", " + std::to_string(num) +
                            ")");
  }
  if (padding_idx && *padding_idx < 0) padding_idx = *padding_idx + num;  // torch's convention
  std::vector<int64_t> out_dims = indices.shape().dims();
  out_dims.push_back(weight.size(1));
  Tensor y = ops::index_select(weight, indices.contiguous().reshape(Shape{-1}))
                 .reshape(Shape(out_dims));
  record_op({weight}, {&y}, [&] {
    return std::make_shared<EmbeddingBackward>(indices, weight.shape(), padding_idx);
  });
  return y;
}

}  // namespace pipewright::autograd
