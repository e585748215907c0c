// scaled_dot_product_attention as a differentiable op over the tiled kernels.
#include "autograd/attention.h"

#include <cmath>

#include "autograd/function_node.h"
#include "autograd/precision.h"
#include "tensor/attention.h"

namespace pipewright::autograd {
namespace {

class FlashAttentionBackward final : public FunctionNode {
 public:
  FlashAttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, double scale, bool causal)
      : FunctionNode({q, k, v, out, lse}), scale_(scale), causal_(causal) {}
  const char* name() const override { return "FlashAttentionBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads,
                               const std::vector<bool>& /*wanted*/) override {
    const Tensor &q = saved(0), &out = saved(3);
    // The gradient enters in the operands' dtype, as a batched matmul's does (Note [The
    // precision policy]); one kernel gives all three gradients, so all are computed.
    const Tensor g = grads[0].to(q.dtype());
    return ops::flash_attention_backward(q, saved(1), saved(2), out, g, saved(4), scale_,
                                         causal_);
  }

 private:
  double scale_;
  bool causal_;
};

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal, std::optional<double> scale) {
  const int64_t head_dim = q.defined() && q.dim() > 0 ? q.size(-1) : 1;
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  const Tensor q_op = product_operand(q), k_op = product_operand(k), v_op = product_operand(v);
  ops::AttentionResult r = ops::flash_attention(q_op, k_op, v_op, s, causal);
  Tensor y = r.out;
  record_op({q, k, v}, {&y}, [&] {
    return std::make_shared<FlashAttentionBackward>(q_op, k_op, v_op, y, r.lse, s, causal);
  });
  return y;
}

}  // namespace pipewright::autograd
