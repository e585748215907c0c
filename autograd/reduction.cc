// sum and mean as differentiable ops: one node, parameterised by the reduced dim and scale.
#include "autograd/reduction.h"

#include <limits>

#include "autograd/function_node.h"
#include "tensor/ops.h"

namespace pipewright::autograd {
namespace {

constexpr int64_t kAllDims = std::numeric_limits<int64_t>::min();  // "over all elements"

/// y = scale · Σ x (over all elements, or over `dim`); dx = scale · g repeated to x's shape.
class SumBackward final : public FunctionNode {
 public:
  SumBackward(const char* name, const Tensor& x, int64_t dim, double scale)
      : name_(name), input_shape_(x.shape()), dim_(dim), scale_(scale) {}
  const char* name() const override { return name_; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    Tensor g = scale_ == 1.0 ? grads[0] : ops::mul(grads[0], scale_);
    if (dim_ == kAllDims) {
      // Broadcasting the one-element g against zeros repeats it everywhere.
      return {ops::add(Tensor::zeros(input_shape_, options_of(g)), g.reshape(Shape{1}))};
    }
    return {expand_along(g, input_shape_, dim_)};
  }

 private:
  const char* name_;
  Shape input_shape_;
  int64_t dim_;
  double scale_;
};

Tensor record_sum(const char* name, const Tensor& x, Tensor y, int64_t dim, double scale) {
  record_op({x}, {&y}, [&] { return std::make_shared<SumBackward>(name, x, dim, scale); });
  return y;
}

}  // namespace

Tensor sum(const Tensor& x) { return record_sum("SumBackward", x, ops::sum(x), kAllDims, 1.0); }

Tensor mean(const Tensor& x) {
  return record_sum("MeanBackward", x, ops::mean(x), kAllDims, 1.0 / static_cast<double>(x.numel()));
}

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = x.shape().wrap_dim(dim);
  return record_sum("SumBackward", x, ops::sum(x, d, keepdim), d, 1.0);
}

Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = x.shape().wrap_dim(dim);
  return record_sum("MeanBackward", x, ops::mean(x, d, keepdim), d,
                    1.0 / static_cast<double>(x.size(d)));
}

}  // namespace pipewright::autograd
