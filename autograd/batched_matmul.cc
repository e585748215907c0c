// batched_matmul as a differentiable op, and the reduction of a broadcast gradient.
#include "autograd/batched_matmul.h"

#include <stdexcept>
#include <vector>

#include "autograd/function_node.h"
#include "autograd/precision.h"
#include "tensor/batched_matmul.h"
#include "tensor/ops.h"

namespace pipewright::autograd {
namespace {

class BatchedMatmulBackward final : public FunctionNode {
 public:
  BatchedMatmulBackward(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b)
      : FunctionNode({a, b}), trans_a_(trans_a), trans_b_(trans_b) {}
  const char* name() const override { return "BatchedMatmulBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads,
                               const std::vector<bool>& wanted) override {
    const Tensor &a = saved(0), &b = saved(1);
    const Tensor g = grads[0].to(a.dtype());  // Note [The precision policy]
    Tensor ga, gb;
    // d op(a) = G·op(b)ᵀ; when op(a) = aᵀ, da = op(b)·Gᵀ.
    if (wanted[0]) {
      ga = trans_a_ ? ops::batched_matmul(b, g, trans_b_, true)
                    : ops::batched_matmul(g, b, false, !trans_b_);
      ga = sum_to_shape(ga, a.shape());
    }
    // d op(b) = op(a)ᵀ·G; when op(b) = bᵀ, db = Gᵀ·op(a).
    if (wanted[1]) {
      gb = trans_b_ ? ops::batched_matmul(g, a, true, trans_a_)
                    : ops::batched_matmul(a, g, !trans_a_, false);
      gb = sum_to_shape(gb, b.shape());
    }
    return {ga, gb};
  }

 private:
  bool trans_a_, trans_b_;
};

}  // namespace

Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.dim() - shape.rank();
  if (lead < 0 || ops::broadcast_shapes(shape, g.shape()) != g.shape()) {
    throw std::invalid_argument("sum_to_shape: " + shape.str() + " does not broadcast to " +
                                g.shape().str());
  }
  // The leading dims, as one: [prod(lead dims), shape...] summed over dim 0.
  int64_t outer = 1;
  for (int64_t d = 0; d < lead; ++d) outer *= g.size(d);
  std::vector<int64_t> dims{outer};
  dims.insert(dims.end(), g.shape().dims().begin() + lead, g.shape().dims().end());
  Tensor out = lead == 0 ? g : ops::sum(g.reshape(Shape(dims)), 0);
  for (int64_t d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1 && out.size(d) != 1) out = ops::sum(out, d, /*keepdim=*/true);
  }
  return out;
}

Tensor batched_matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const Tensor a_op = product_operand(a), b_op = product_operand(b);
  Tensor y = ops::batched_matmul(a_op, b_op, trans_a, trans_b);
  record_op({a, b}, {&y}, [&] {
    return std::make_shared<BatchedMatmulBackward>(a_op, b_op, trans_a, trans_b);
  });
  return y;
}

}  // namespace pipewright::autograd
