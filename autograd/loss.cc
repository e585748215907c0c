// mse_loss (composed of differentiable ops) and cross_entropy (one node over the kernel
// table's cross_entropy / cross_entropy_backward).
#include "autograd/loss.h"

#include <stdexcept>
#include <string>

#include "autograd/elementwise.h"
#include "autograd/function_node.h"
#include "autograd/reduction.h"
#include "tensor/check.h"
#include "tensor/kernels.h"
#include "tensor/ops.h"

namespace pipewright::autograd {
namespace {

/// The per-sample loss gradient [N] from the gradient of the reduced loss.
Tensor per_sample_grad(const Tensor& g, Reduction reduction, int64_t n) {
  if (reduction == Reduction::kNone) return g;
  Tensor repeated = ops::add(Tensor::zeros(Shape{n}, options_of(g)), g.reshape(Shape{1}));
  return reduction == Reduction::kSum ? repeated : ops::mul(repeated, 1.0 / static_cast<double>(n));
}

class CrossEntropyBackward final : public FunctionNode {
 public:
  CrossEntropyBackward(const Tensor& logp, const Tensor& target, double eps, Reduction reduction)
      : FunctionNode({logp, target}), eps_(eps), reduction_(reduction) {}
  const char* name() const override { return "CrossEntropyBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    const Tensor &logp = saved(0), &target = saved(1);
    Tensor grad_loss = per_sample_grad(grads[0], reduction_, logp.size(0)).contiguous();
    Tensor grad_logits = Tensor::empty(logp.shape(), options_of(logp));
    PW_KERNEL(logp.device(), cross_entropy_backward)(logp, target, eps_, grad_loss, grad_logits);
    return {grad_logits};
  }

 private:
  double eps_;
  Reduction reduction_;
};

void check_cross_entropy_args(const Tensor& logits, const Tensor& target, double eps) {
  check_operand("cross_entropy", "target", target, DType::kInt64, logits.device(), "logits",
                logits, ", which take int64 class indices on their device");
  const bool ok = logits.dim() == 2 && is_floating(logits.dtype()) &&
                  target.dtype() == DType::kInt64 && target.dim() == 1 &&
                  target.size(0) == logits.size(0) && target.device() == logits.device();
  if (!ok) {
    throw std::invalid_argument(
        "cross_entropy: logits have shape " + logits.shape().str() + " (" +
        dtype_name(logits.dtype()) + ", " + logits.device().str() + ") and target shape " +
        target.shape().str() + " (" + dtype_name(target.dtype()) + ", " +
        target.device().str() + "); expected floating logits [N, C] and int64 target [N] on "
        "the same device" +
        (logits.dim() > 2 ? std::string("; flatten the leading dimensions with "
                                        "autograd::reshape(logits, {-1, C}) and target.reshape("
                                        "{-1}) (Tensor::reshape on the logits would drop their "
                                        "autograd history)")
                          : std::string()));
  }
  if (!(eps >= 0.0 && eps <= 1.0)) {
    throw std::invalid_argument("cross_entropy: label_smoothing must be in [0, 1], got " +
                                std::to_string(eps));
  }
}

}  // namespace

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::kMean: return "mean";
    case Reduction::kSum: return "sum";
    default: return "none";
  }
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_like("mse_loss", "target", target, "input", input);
  if (input.shape() != target.shape()) {
    throw std::invalid_argument("mse_loss: input has shape " + input.shape().str() +
                                " but target has shape " + target.shape().str());
  }
  Tensor squared = square(sub(input, target));
  if (reduction == Reduction::kNone) return squared;
  return reduction == Reduction::kSum ? sum(squared) : mean(squared);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     double label_smoothing) {
  check_cross_entropy_args(logits, target, label_smoothing);
  Tensor logp = ops::log_softmax(logits);
  Tensor target_c = target.contiguous();
  Tensor losses = Tensor::empty(Shape{logits.size(0)}, options_of(logits));
  PW_KERNEL(logits.device(), cross_entropy)(logp, target_c, label_smoothing, losses);
  Tensor y = reduction == Reduction::kNone  ? losses
             : reduction == Reduction::kSum ? ops::sum(losses)
                                            : ops::mean(losses);
  record_op({logits}, {&y}, [&] {
    return std::make_shared<CrossEntropyBackward>(logp, target_c, label_smoothing, reduction);
  });
  return y;
}

}  // namespace pipewright::autograd
