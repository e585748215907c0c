// Differentiable elementwise ops: one node class for the binary ops, one for the unary ones.
#include "autograd/elementwise.h"

#include "autograd/function_node.h"
#include "tensor/ops.h"

namespace pipewright::autograd {
namespace {

// ---- binary: a op b with broadcasting ----

class BinaryBackward final : public FunctionNode {
 public:
  // Saves a and b (handles only: no copy) for mul and div.
  BinaryBackward(BinaryOp op, const Tensor& a, const Tensor& b)
      : FunctionNode(op == BinaryOp::kMul || op == BinaryOp::kDiv ? std::vector<Tensor>{a, b}
                                                                  : std::vector<Tensor>{}),
        op_(op),
        a_shape_(a.shape()),
        b_shape_(b.shape()) {}

  const char* name() const override {
    switch (op_) {
      case BinaryOp::kAdd: return "AddBackward";
      case BinaryOp::kSub: return "SubBackward";
      case BinaryOp::kMul: return "MulBackward";
      default: return "DivBackward";
    }
  }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads,
                               const std::vector<bool>& wanted) override {
    const Tensor& g = grads[0];
    Tensor ga, gb;
    switch (op_) {
      case BinaryOp::kAdd:
        ga = gb = g;
        break;
      case BinaryOp::kSub:
        ga = g;
        if (wanted[1]) gb = ops::neg(g);
        break;
      case BinaryOp::kMul:
        if (wanted[0]) ga = ops::mul(g, saved(1));
        if (wanted[1]) gb = ops::mul(g, saved(0));
        break;
      default: {  // kDiv: d/da = g/b, d/db = -(g/b)·(a/b)
        Tensor g_over_b = ops::div(g, saved(1));
        if (wanted[1]) gb = ops::neg(ops::mul(g_over_b, ops::div(saved(0), saved(1))));
        ga = std::move(g_over_b);
      }
    }
    return {wanted[0] ? reduce_to_shape(ga, a_shape_) : Tensor(),
            wanted[1] ? reduce_to_shape(gb, b_shape_) : Tensor()};
  }

 private:
  BinaryOp op_;
  Shape a_shape_, b_shape_;
};

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor y) {
  record_op({a, b}, {&y}, [&] { return std::make_shared<BinaryBackward>(op, a, b); });
  return y;
}

// ---- unary: y = f(x), and the scalar ops x + s, x * s ----

enum class Unary { kNeg, kExp, kLog, kSqrt, kSquare, kTanh, kSigmoid, kRelu, kAddScalar,
                   kMulScalar };

// Which tensor the gradient formula needs: the input x, the output y, or neither.
enum class Needs { kNothing, kInput, kOutput };

Needs needs(Unary f) {
  switch (f) {
    case Unary::kLog:
    case Unary::kSquare: return Needs::kInput;
    case Unary::kExp:
    case Unary::kSqrt:
    case Unary::kTanh:
    case Unary::kSigmoid:
    case Unary::kRelu: return Needs::kOutput;
    default: return Needs::kNothing;
  }
}

class UnaryBackward final : public FunctionNode {
 public:
  UnaryBackward(Unary f, const Tensor& x, const Tensor& y, double scalar)
      : FunctionNode(needs(f) == Needs::kInput    ? std::vector<Tensor>{x}
                     : needs(f) == Needs::kOutput ? std::vector<Tensor>{y}
                                                  : std::vector<Tensor>{}),
        f_(f),
        scalar_(scalar) {}

  const char* name() const override {
    static constexpr const char* kNames[] = {
        "NegBackward",  "ExpBackward",     "LogBackward",  "SqrtBackward",      "SquareBackward",
        "TanhBackward", "SigmoidBackward", "ReluBackward", "AddScalarBackward", "MulScalarBackward"};
    return kNames[static_cast<int>(f_)];
  }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads,
                               const std::vector<bool>&) override {
    const Tensor& g = grads[0];
    switch (f_) {
      case Unary::kNeg: return {ops::neg(g)};
      case Unary::kExp: return {ops::mul(g, saved(0))};
      case Unary::kLog: return {ops::div(g, saved(0))};
      case Unary::kSqrt: return {ops::div(g, ops::mul(saved(0), 2.0))};
      case Unary::kSquare: return {ops::mul(ops::mul(g, saved(0)), 2.0)};
      case Unary::kTanh: return {ops::mul(g, ops::rsub(ops::square(saved(0)), 1.0))};
      case Unary::kSigmoid:
        return {ops::mul(ops::mul(g, saved(0)), ops::rsub(saved(0), 1.0))};
      case Unary::kRelu: return {ops::relu_backward(g, saved(0))};
      case Unary::kAddScalar: return {g};
      case Unary::kMulScalar: return {ops::mul(g, scalar_)};
    }
    return {Tensor()};
  }

 private:
  Unary f_;
  double scalar_;
};

Tensor unary(Unary f, const Tensor& x, Tensor y, double scalar = 0.0) {
  record_op({x}, {&y}, [&] { return std::make_shared<UnaryBackward>(f, x, y, scalar); });
  return y;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kAdd, a, b, ops::add(a, b)); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kSub, a, b, ops::sub(a, b)); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kMul, a, b, ops::mul(a, b)); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kDiv, a, b, ops::div(a, b)); }

Tensor add(const Tensor& a, double s) { return unary(Unary::kAddScalar, a, ops::add(a, s), s); }
Tensor mul(const Tensor& a, double s) { return unary(Unary::kMulScalar, a, ops::mul(a, s), s); }

Tensor neg(const Tensor& x) { return unary(Unary::kNeg, x, ops::neg(x)); }
Tensor exp(const Tensor& x) { return unary(Unary::kExp, x, ops::exp(x)); }
Tensor log(const Tensor& x) { return unary(Unary::kLog, x, ops::log(x)); }
Tensor sqrt(const Tensor& x) { return unary(Unary::kSqrt, x, ops::sqrt(x)); }
Tensor square(const Tensor& x) { return unary(Unary::kSquare, x, ops::square(x)); }
Tensor tanh(const Tensor& x) { return unary(Unary::kTanh, x, ops::tanh(x)); }
Tensor sigmoid(const Tensor& x) { return unary(Unary::kSigmoid, x, ops::sigmoid(x)); }
Tensor relu(const Tensor& x) { return unary(Unary::kRelu, x, ops::relu(x)); }

}  // namespace pipewright::autograd
