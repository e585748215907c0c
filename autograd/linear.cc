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

// Note [What a deferred W keeps]
// A zero-bubble schedule runs B (dX) now and W (dW, db) later; in between, the queue keeps
// the node's saved operands and the output gradient dY (engine.h, WeightGradQueue). Under a
// 16-bit policy dY is float32, but both products take it rounded to the operands' dtype
// (Note [The precision policy]), so the queue keeps that rounded copy: half the bytes from
// B to W, and dW from the same bits. Linear's db = Σ_rows dY needs dY unrounded, so under a
// 16-bit policy B makes db too (1ᵀ·dY, a float32 [out]) and the queue keeps it for W to add
// into .grad. For a deferred W to be bitwise the undeferred one, the undeferred backward
// makes db the same way, as a new tensor then added to .grad (float32 adds 1ᵀ·dY straight
// into .grad, beta = 1, deferred or not). Under float32 the queue keeps dY as it is. The
// engine asks what to keep before B runs, and B's dX takes the kept 16-bit dY
// (grad_outputs_for_now): dY is rounded once per micro-batch, as the undeferred backward
// rounds it, not once for B and again for the queue.

class MatmulBackward final : public FunctionNode {
 public:
  /// a, b: the operands as the product took them (16-bit under a precision policy).
  MatmulBackward(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b)
      : FunctionNode({a, b}), trans_a_(trans_a), trans_b_(trans_b) {}
  const char* name() const override { return "MatmulBackward"; }

  /// dY as both products take it (Note [What a deferred W keeps]).
  std::vector<Tensor> keep_for_weight_grads(std::vector<Tensor> grads,
                                            const std::vector<bool>& /*later*/) override {
    return {grads[0].to(saved(0).dtype())};
  }
  /// Both products take that dY: B takes the kept copy.
  std::vector<Tensor> grad_outputs_for_now(const std::vector<Tensor>& /*grads*/,
                                           const std::vector<Tensor>& kept,
                                           const std::vector<bool>& /*now*/) override {
    return {kept[0]};
  }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads,
                               const std::vector<bool>& wanted) override {
    const Tensor &a = saved(0), &b = saved(1);
    const Tensor g = grads[0].to(a.dtype());  // Note [The precision policy]
    Tensor ga, gb;
    // d op(a) = G·op(b)ᵀ; when op(a) = aᵀ, da = (G·op(b)ᵀ)ᵀ = op(b)·Gᵀ.
    if (wanted[0]) {
      ga = trans_a_ ? ops::matmul(b, g, trans_b_, true) : ops::matmul(g, b, false, !trans_b_);
    }
    // d op(b) = op(a)ᵀ·G; when op(b) = bᵀ, db = (op(a)ᵀ·G)ᵀ = Gᵀ·op(a).
    if (wanted[1]) {
      gb = trans_b_ ? ops::matmul(g, a, true, trans_a_) : ops::matmul(a, g, !trans_a_, false);
    }
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

  /// {dY as the products take it, db or undefined} (Note [What a deferred W keeps]).
  std::vector<Tensor> keep_for_weight_grads(std::vector<Tensor> grads,
                                            const std::vector<bool>& later) override {
    const Tensor& g = grads[0];
    if (!narrowed(g)) return {g, Tensor()};
    return {g.to(saved(0).dtype()), has_bias_ && later[2] ? bias_grad(g) : Tensor()};
  }
  /// B takes the kept 16-bit dY when it makes dX alone (db, made now, needs dY unrounded).
  std::vector<Tensor> grad_outputs_for_now(const std::vector<Tensor>& grads,
                                           const std::vector<Tensor>& kept,
                                           const std::vector<bool>& now) override {
    const bool dx_alone = !now[1] && !(has_bias_ && now[2]);
    if (dx_alone && narrowed(grads[0])) return {kept[0]};
    return grads;
  }

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
  /// policy], precision.h), and db is returned for the engine to add (Note [What a deferred
  /// W keeps]).
  std::vector<Tensor> backward_into_grad(const std::vector<Tensor>& grads,
                                         const std::vector<bool>& wanted,
                                         const std::vector<bool>& into_grad) override {
    const Tensor& g = grads[0];
    const Tensor g_op = g.to(saved(0).dtype());
    std::vector<Tensor> out(has_bias_ ? 3 : 2);
    if (wanted[0]) out[0] = ops::matmul(g_op, saved(1));
    if (wanted[1]) out[1] = weight_grad(g_op, into_grad);
    if (has_bias_ && wanted[2]) {
      const int64_t out_features = saved(1).size(0);
      Tensor db = narrowed(g) ? Tensor()
                              : destination(into_grad, 2, Shape{out_features}, g.dtype(),
                                            g.device());
      if (db.defined()) {
        Tensor row = db.reshape(Shape{1, out_features});  // a view of .grad's storage
        ops::gemm_(row, ones_row(g), g, false, false, 1.0, /*beta=*/1.0);
      } else {
        out[2] = bias_grad(g);
      }
    }
    return out;
  }

  /// W from keep_for_weight_grads()'s {dY as the products take it, db or undefined}.
  std::vector<Tensor> backward_weight(const std::vector<Tensor>& kept,
                                      const std::vector<bool>& later) override {
    if (!kept[1].defined()) return backward_into_grad({kept[0]}, later, later);
    std::vector<Tensor> out(3);
    if (later[1]) out[1] = weight_grad(kept[0], later);
    out[2] = kept[1];
    return out;
  }

 private:
  /// 1ᵀ [1, N] for dY [N, out]: the column sums as a product, a BLAS call (a column-sum
  /// kernel on a GPU gives each column one thread).
  static Tensor ones_row(const Tensor& g) {
    return Tensor::ones(Shape{1, g.size(0)}, options_of(g));
  }

  /// db = Σ_rows dY = 1ᵀ·dY [out], a new tensor.
  static Tensor bias_grad(const Tensor& g) {
    return ops::matmul(ones_row(g), g).reshape(Shape{g.size(1)});
  }

  /// Whether the products take dY rounded to a narrower dtype (a 16-bit policy).
  bool narrowed(const Tensor& g) const { return g.dtype() != saved(0).dtype(); }

  /// dW = dYᵀ·X, added into .grad when allowed (then undefined is returned).
  Tensor weight_grad(const Tensor& g_op, const std::vector<bool>& into_grad) const {
    const Tensor &x = saved(0), &w = saved(1);
    // The product of 16-bit operands is float32 (gemm_result_dtype), as the parameter is.
    Tensor dw = destination(into_grad, 1, w.shape(), gemm_result_dtype(g_op.dtype()),
                            g_op.device());
    if (!dw.defined()) return ops::matmul(g_op, x, true, false);
    ops::gemm_(dw, g_op, x, /*trans_a=*/true, /*trans_b=*/false, 1.0, /*beta=*/1.0);
    return {};
  }

  /// The .grad of input i to accumulate into, or undefined (then the gradient is returned).
  Tensor destination(const std::vector<bool>& into_grad, size_t i, const Shape& shape,
                     DType dtype, const Device& device) const {
    if (i >= into_grad.size() || !into_grad[i]) return {};
    const Edge& edge = next_edges()[i];
    if (edge.leaf == nullptr) return {};
    return grad_to_accumulate_into(*edge.leaf, shape, dtype, device);
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
    // The bias in the GEMM (torch's addmm): on a GPU in cuBLASLt's epilogue, y written once;
    // on the CPU as C's start with beta = 1. No second tensor; a last bit may differ from a
    // separate add's.
    y = ops::matmul_bias(x_op, w_op, bias, false, true);
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
