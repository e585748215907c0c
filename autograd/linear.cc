// matmul and linear as differentiable ops.
#include "autograd/linear.h"

#include <stdexcept>

#include "autograd/function_node.h"
#include "autograd/grad_buffer.h"
#include "autograd/precision.h"
#include "autograd/shape_ops.h"
#include "tensor/ops.h"
#include "tensor/views.h"

namespace pipewright::autograd {
namespace {

class MatmulBackward final : public FunctionNode {
 public:
  /// a, b: the operands as the product took them (16-bit under a precision policy).
  MatmulBackward(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b)
      : FunctionNode({a, b}), trans_a_(trans_a), trans_b_(trans_b) {}
  const char* name() const override { return "MatmulBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads,
                               const std::vector<bool>& wanted) override {
    const Tensor &a = saved(0), &b = saved(1);
    const Tensor g = grads[0].to(a.dtype());  // Note [The precision policy]
    Tensor ga, gb;
    // d op(a) = G·op(b)ᵀ; when op(a) = aᵀ, da = (G·op(b)ᵀ)ᵀ = op(b)·Gᵀ.
    if (wanted[0]) ga = trans_a_ ? ops::matmul(b, g, trans_b_, true) : ops::matmul(g, b, false, !trans_b_);
    // d op(b) = op(a)ᵀ·G; when op(b) = bᵀ, db = (op(a)ᵀ·G)ᵀ = Gᵀ·op(a).
    if (wanted[1]) gb = trans_b_ ? ops::matmul(g, a, true, trans_a_) : ops::matmul(a, g, !trans_a_, false);
    return {ga, gb};
  }

 private:
  bool trans_a_, trans_b_;
};

class LinearBackward final : public FunctionNode {
 public:
  /// x, weight: the operands as the product took them (16-bit under a precision policy).
  LinearBackward(const Tensor& x, const Tensor& weight, bool has_bias)
      : FunctionNode({x, weight}), has_bias_(has_bias) {}
  const char* name() const override { return "LinearBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads,
                               const std::vector<bool>& wanted) override {
    return backward_into_grad(grads, wanted, {});
  }

  /// B: dX = dY·W [N, in]. W: dW = dYᵀ·X [out, in] and db = Σ_rows dY [out], each either
  /// returned or, when the engine allows it and .grad is there to take it, added straight
  /// into .grad by the GEMM itself (beta = 1; db as the product 1ᵀ·dY) — Note [Weight
  /// gradients accumulated in place] in node.h. Under a precision policy dY enters the two
  /// products rounded to X's 16-bit dtype, their results and db float32 (Note [The precision
  /// policy], precision.h).
  std::vector<Tensor> backward_into_grad(const std::vector<Tensor>& grads,
                                         const std::vector<bool>& wanted,
                                         const std::vector<bool>& into_grad) override {
    const Tensor &g = grads[0], &x = saved(0), &w = saved(1);
    const Tensor g_op = g.to(x.dtype());
    std::vector<Tensor> out(has_bias_ ? 3 : 2);
    if (wanted[0]) out[0] = ops::matmul(g_op, w);
    if (wanted[1]) {
      Tensor dw = destination(into_grad, 1, w.shape(), g);
      if (dw.defined()) {
        ops::gemm_(dw, g_op, x, /*trans_a=*/true, /*trans_b=*/false, 1.0, /*beta=*/1.0);
      } else {
        out[1] = ops::matmul(g_op, x, true, false);
      }
    }
    if (has_bias_ && wanted[2]) {
      const int64_t out_features = w.size(0);
      Tensor db = destination(into_grad, 2, Shape{out_features}, g);
      if (db.defined()) {
        Tensor row = db.reshape(Shape{1, out_features});  // a view of .grad's storage
        const Tensor ones = Tensor::ones(Shape{1, g.size(0)}, options_of(g));
        ops::gemm_(row, ones, g, false, false, 1.0, /*beta=*/1.0);
      } else {
        out[2] = ops::sum(g, 0);
      }
    }
    return out;
  }

 private:
  /// The .grad of input i to accumulate into, or undefined (then the gradient is returned).
  Tensor destination(const std::vector<bool>& into_grad, size_t i, const Shape& shape,
                     const Tensor& like) const {
    if (i >= into_grad.size() || !into_grad[i]) return {};
    const Edge& edge = next_edges()[i];
    if (edge.leaf == nullptr) return {};
    return grad_to_accumulate_into(*edge.leaf, shape, like.dtype(), like.device());
  }

  bool has_bias_;
};

void check_linear_args(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (weight.dim() != 2 || x.dim() < 1 || x.size(-1) != weight.size(1) ||
      (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0)))) {
    throw std::invalid_argument(
        "linear: input has shape " + x.shape().str() + ", weight " + weight.shape().str() +
        ", bias " + (bias.defined() ? bias.shape().str() : std::string("none")) +
        "; expected input [*, in], weight [out, in], bias [out]");
  }
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const Tensor a_op = product_operand(a), b_op = product_operand(b);
  Tensor y = ops::matmul(a_op, b_op, trans_a, trans_b);
  record_op({a, b}, {&y},
            [&] { return std::make_shared<MatmulBackward>(a_op, b_op, trans_a, trans_b); });
  return y;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear_args(x, weight, bias);
  if (x.dim() != 2) {
    // [*, in] -> [N, in] -> [N, out] -> [*, out], each step recorded.
    std::vector<int64_t> out_dims = x.shape().dims();
    out_dims.back() = weight.size(0);
    return reshape(linear(reshape(x, Shape{-1, weight.size(1)}), weight, bias),
                   Shape(out_dims));
  }
  const Tensor x_op = product_operand(x), w_op = weight_operand(weight);
  Tensor y;
  if (bias.defined() && bias.dtype() == gemm_result_dtype(x_op.dtype()) &&
      bias.device() == x_op.device()) {
    // The bias is C's start and the GEMM adds x·Wᵀ to it (beta = 1, torch's addmm): one pass
    // over y instead of the product's and the add's two, and no second tensor. The BLAS adds
    // C where its K loop puts it, so a last bit may differ from a separate add's. clone, not
    // contiguous(): with one row the expanded view is contiguous, and the GEMM would write
    // into the bias.
    y = ops::expand(bias, Shape{x_op.size(0), weight.size(0)}).clone();
    ops::gemm_(y, x_op, w_op, false, true, 1.0, 1.0);
  } else {
    y = ops::matmul(x_op, w_op, false, true);
    if (bias.defined()) y = ops::add(y, bias);  // throws the add's message for a mismatch
  }
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  record_op(inputs, {&y},
            [&] { return std::make_shared<LinearBackward>(x_op, w_op, bias.defined()); });
  return y;
}

}  // namespace pipewright::autograd
