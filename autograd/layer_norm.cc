// layer_norm and rms_norm as differentiable ops: one node each, whose backward computes only
// the gradients it is asked for, x, weight and bias in one pass (zero-bubble's B takes all
// three: Note [What W takes] in engine.cc).
#include "autograd/layer_norm.h"

#include "autograd/function_node.h"
#include "tensor/normalization.h"

namespace pipewright::autograd {
namespace {

class NormBackward final : public FunctionNode {
 public:
  NormBackward(const Tensor& x, const Tensor& weight, const ops::NormForward& forward, bool rms)
      : FunctionNode({x, weight, forward.mean, forward.rstd}), rms_(rms) {}
  const char* name() const override { return rms_ ? "RMSNormBackward" : "LayerNormBackward"; }
  /// Its parameter gradients are computed in B (Note [What W takes], engine.cc).
  bool defers_weight_grads() const override { return false; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads,
                               const std::vector<bool>& wanted) override {
    const ops::NormForward forward{Tensor(), saved(2), saved(3)};
    // Inputs: x, weight (and bias for LayerNorm); an undefined weight or bias is never wanted.
    const ops::NormGrads g = ops::norm_backward(grads[0], saved(0), saved(1), forward, rms_,
                                                wanted[0], wanted[1], !rms_ && wanted[2]);
    if (rms_) return {g.x, g.weight};
    return {g.x, g.weight, g.bias};
  }

 private:
  bool rms_;
};

Tensor record_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const ops::NormForward& forward, bool rms) {
  Tensor y = forward.y;
  std::vector<Tensor> inputs{x, weight};
  if (!rms) inputs.push_back(bias);
  record_op(inputs, {&y}, [&] { return std::make_shared<NormBackward>(x, weight, forward, rms); });
  return y;
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return record_norm(x, weight, bias, ops::layer_norm(x, weight, bias, eps), false);
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  return record_norm(x, weight, Tensor(), ops::rms_norm(x, weight, eps), true);
}

}  // namespace pipewright::autograd
