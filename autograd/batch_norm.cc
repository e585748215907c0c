// batch_norm_train / batch_norm_eval: forwards and backwards through the kernel table's
// batch_norm_* kernels on x viewed as [N, C, L].
#include "autograd/batch_norm.h"

#include <stdexcept>

#include "autograd/function_node.h"
#include "tensor/kernels.h"
#include "tensor/ops.h"

namespace pipewright::autograd {
namespace {

/// x's [N, C, L] view sizes, after checking x, gamma, beta and the running statistics.
struct NclDims {
  int64_t n, c, l;
};

NclDims check_batch_norm_args(const Tensor& x, const std::vector<Tensor>& per_channel) {
  bool ok = x.dim() == 2 || x.dim() == 3;
  const int64_t c = ok ? x.size(1) : 0;
  for (const Tensor& t : per_channel) {
    ok = ok && (!t.defined() || t.shape() == Shape{c});
  }
  if (!ok) {
    std::string got = "input " + x.shape().str();
    for (const Tensor& t : per_channel) got += ", " + (t.defined() ? t.shape().str() : "none");
    throw std::invalid_argument("batch_norm: expected input [N, C] or [N, C, L] and per-channel "
                                "tensors [C], got " + got);
  }
  return {x.size(0), c, x.dim() == 3 ? x.size(2) : 1};
}

/// Σ over N and L of t viewed as [N, C, L] -> [C].
Tensor sum_per_channel(const Tensor& t, const NclDims& d) {
  if (d.l == 1) return ops::sum(t.reshape(Shape{d.n, d.c}), 0);
  return ops::sum(ops::sum(t.reshape(Shape{d.n, d.c, d.l}), 2), 0);
}

class BatchNormBackward final : public FunctionNode {
 public:
  BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                    const Tensor& invstd, NclDims dims)
      : FunctionNode({x, gamma, mean, invstd}), dims_(dims) {}
  const char* name() const override { return "BatchNormBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads,
                               const std::vector<bool>& wanted) override {
    const Tensor &x = saved(0), &gamma = saved(1);
    Tensor g = grads[0].contiguous();
    const TensorOptions opts = options_of(x);
    Tensor gx = wanted[0] ? Tensor::empty(x.shape(), opts) : Tensor();
    Tensor ggamma = wanted[1] ? Tensor::empty(Shape{dims_.c}, opts) : Tensor();
    Tensor gbeta = wanted[2] ? Tensor::empty(Shape{dims_.c}, opts) : Tensor();
    PW_KERNEL(x.device(), batch_norm_backward)(g, x, gamma, saved(2), saved(3), dims_.n, dims_.c,
                                               dims_.l, gx, ggamma, gbeta);
    return {gx, ggamma, gbeta};
  }

 private:
  NclDims dims_;
};

class BatchNormEvalBackward final : public FunctionNode {
 public:
  BatchNormEvalBackward(const Tensor& x, const Tensor& gamma, const Tensor& running_mean,
                        const Tensor& running_var, double eps, NclDims dims)
      : FunctionNode({x, gamma, running_mean, running_var}), eps_(eps), dims_(dims) {}
  const char* name() const override { return "BatchNormEvalBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads,
                               const std::vector<bool>& wanted) override {
    const Tensor &x = saved(0), &gamma = saved(1), &rm = saved(2), &rv = saved(3);
    Tensor g = grads[0].contiguous();
    auto normalise = [&](const Tensor& in, const Tensor& scale, const Tensor& mean) {
      Tensor out = Tensor::empty(in.shape(), options_of(in));
      PW_KERNEL(in.device(), batch_norm_eval)(in, scale, Tensor(), mean, rv, eps_, dims_.n,
                                              dims_.c, dims_.l, out);
      return out;
    };
    Tensor gx, ggamma, gbeta;
    // dx = g · gamma / sqrt(rv + eps): the eval normalisation of g with a zero mean.
    if (wanted[0]) gx = normalise(g, gamma, Tensor::zeros(Shape{dims_.c}, options_of(x)));
    if (wanted[1]) ggamma = sum_per_channel(ops::mul(g, normalise(x.contiguous(), Tensor(), rm)), dims_);
    if (wanted[2]) gbeta = sum_per_channel(g, dims_);
    return {gx, ggamma, gbeta};
  }

 private:
  double eps_;
  NclDims dims_;
};

}  // namespace

Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                        BatchNormStats* stats) {
  const NclDims d = check_batch_norm_args(x, {gamma, beta});
  if (d.n * d.l <= 1) {
    throw std::invalid_argument("batch_norm: expected more than 1 value per channel when "
                                "training, got input of shape " + x.shape().str());
  }
  const TensorOptions opts = options_of(x);
  Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), opts);
  Tensor mean = Tensor::empty(Shape{d.c}, opts), invstd = Tensor::empty(Shape{d.c}, opts);
  // The double variance only when the caller keeps the statistics (running stats).
  Tensor var = stats != nullptr ? Tensor::empty(Shape{d.c}, {DType::kFloat64, x.device()})
                                : Tensor();
  PW_KERNEL(x.device(), batch_norm_train)(xc, gamma.defined() ? gamma.contiguous() : gamma,
                                          beta.defined() ? beta.contiguous() : beta, eps, d.n,
                                          d.c, d.l, y, mean, invstd, var);
  record_op({x, gamma, beta}, {&y}, [&] {
    return std::make_shared<BatchNormBackward>(xc, gamma, mean, invstd, d);
  });
  if (stats != nullptr) *stats = {mean, invstd, var};
  return y;
}

void accumulate_batch_stats(const BatchNormStats& stats, int64_t count, Tensor& sum,
                            Tensor& sum_sq) {
  if (!stats.mean.defined() || !stats.var.defined()) {
    throw std::invalid_argument(
        "accumulate_batch_stats: the statistics need mean and the float64 var of "
        "batch_norm_train");
  }
  const int64_t c = stats.mean.numel();
  for (const Tensor* t : {&sum, &sum_sq}) {
    if (!t->defined() || t->dtype() != DType::kFloat64 || t->numel() != c ||
        t->device() != stats.mean.device() || !t->is_contiguous()) {
      throw std::invalid_argument(
          "accumulate_batch_stats: sum and sum_sq must be contiguous float64 [" +
          std::to_string(c) + "] on " + stats.mean.device().str() + ", got " +
          (t->defined() ? std::string(dtype_name(t->dtype())) + " " + t->shape().str() + " on " +
                              t->device().str()
                        : std::string("an undefined tensor")));
    }
  }
  PW_KERNEL(stats.mean.device(), batch_norm_accumulate)(stats.mean, stats.var,
                                                        static_cast<double>(count), sum, sum_sq);
}

Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, double eps) {
  const NclDims d = check_batch_norm_args(x, {gamma, beta, running_mean, running_var});
  if (!running_mean.defined() || !running_var.defined()) {
    throw std::invalid_argument("batch_norm_eval: running_mean and running_var are required");
  }
  Tensor y = Tensor::empty(x.shape(), options_of(x));
  PW_KERNEL(x.device(), batch_norm_eval)(x.contiguous(), gamma.defined() ? gamma.contiguous() : gamma,
                                         beta.defined() ? beta.contiguous() : beta,
                                         running_mean.contiguous(), running_var.contiguous(), eps,
                                         d.n, d.c, d.l, y);
  record_op({x, gamma, beta}, {&y}, [&] {
    // Copies of the running statistics ([C], cheap): the module may update its buffers in
    // place before this backward runs.
    return std::make_shared<BatchNormEvalBackward>(x, gamma, running_mean.clone(),
                                                   running_var.clone(), eps, d);
  });
  return y;
}

}  // namespace pipewright::autograd
