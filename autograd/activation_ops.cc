// erf and gelu as differentiable ops.
#include "autograd/activation_ops.h"

#include "autograd/function_node.h"
#include "tensor/gelu.h"
#include "tensor/ops.h"

namespace pipewright::autograd {
namespace {

constexpr double kTwoOverSqrtPi = 1.12837916709551257390;  // 2/√π

class ErfBackward final : public FunctionNode {
 public:
  explicit ErfBackward(const Tensor& x) : FunctionNode({x}) {}
  const char* name() const override { return "ErfBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    const Tensor& x = saved(0);
    return {ops::mul(grads[0], ops::mul(ops::exp(ops::neg(ops::square(x))), kTwoOverSqrtPi))};
  }
};

class GeluBackward final : public FunctionNode {
 public:
  GeluBackward(const Tensor& x, bool tanh_approximation)
      : FunctionNode({x}), tanh_approximation_(tanh_approximation) {}
  const char* name() const override { return "GeluBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    return {ops::gelu_backward(grads[0], saved(0), tanh_approximation_)};
  }

 private:
  bool tanh_approximation_;
};

}  // namespace

Tensor erf(const Tensor& x) {
  Tensor y = ops::erf(x);
  record_op({x}, {&y}, [&] { return std::make_shared<ErfBackward>(x); });
  return y;
}

Tensor gelu(const Tensor& x, bool tanh_approximation) {
  Tensor y = ops::gelu(x, tanh_approximation);
  record_op({x}, {&y}, [&] { return std::make_shared<GeluBackward>(x, tanh_approximation); });
  return y;
}

}  // namespace pipewright::autograd
