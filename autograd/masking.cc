// masked_fill and causal_softmax as differentiable ops.
#include "autograd/masking.h"

#include "autograd/function_node.h"
#include "tensor/kernels.h"
#include "tensor/masking.h"

namespace pipewright::autograd {
namespace {

class MaskedFillBackward final : public FunctionNode {
 public:
  explicit MaskedFillBackward(const Tensor& mask) : FunctionNode({mask}) {}
  const char* name() const override { return "MaskedFillBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    return {ops::masked_fill(grads[0], saved(0), 0.0)};
  }
};

class CausalSoftmaxBackward final : public FunctionNode {
 public:
  CausalSoftmaxBackward(const Tensor& y, double scale) : FunctionNode({y}), scale_(scale) {}
  const char* name() const override { return "CausalSoftmaxBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    const Tensor& y = saved(0);
    if (y.numel() == 0) return {Tensor::zeros(y.shape(), options_of(y))};
    const Shape stack{-1, y.size(-2), y.size(-1)};
    const Tensor y3 = y.reshape(stack), g3 = grads[0].contiguous().reshape(stack);
    Tensor gx = Tensor::empty(y3.shape(), options_of(y));
    PW_KERNEL(y.device(), causal_softmax_backward)(g3, y3, scale_, gx);
    return {gx.reshape(y.shape())};
  }

 private:
  double scale_;
};

}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  Tensor y = ops::masked_fill(x, mask, value);
  record_op({x}, {&y}, [&] { return std::make_shared<MaskedFillBackward>(mask); });
  return y;
}

Tensor causal_softmax(const Tensor& x, double scale) {
  Tensor y = ops::causal_softmax(x, scale);
  record_op({x}, {&y}, [&] { return std::make_shared<CausalSoftmaxBackward>(y, scale); });
  return y;
}

}  // namespace pipewright::autograd
