// batch_norm_train / batch_norm_eval: forwards and backwards through the kernel table's
// batch_norm_* kernels on x viewed as [N, C, L].
#include "autograd/batch_norm.h"

#include <stdexcept>
#include <string>

#include "autograd/function_node.h"
#include "tensor/graph.h"
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
  /// Its parameter gradients are computed in B (Note [What W takes], engine.cc).
  bool defers_weight_grads() const override { return false; }

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
  /// Its parameter gradients are computed in B (Note [What W takes], engine.cc).
  bool defers_weight_grads() const override { return false; }

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

namespace {

/// Throws unless t is a contiguous [c] tensor of `dtype` on `device` ("float64 [3] on cuda:0").
void check_stats_tensor(const char* op, const char* name, const Tensor& t, DType dtype, int64_t c,
                        const Device& device) {
  if (t.defined() && t.dtype() == dtype && t.numel() == c && t.dim() == 1 &&
      t.device() == device && t.is_contiguous()) {
    return;
  }
  throw std::invalid_argument(
      std::string(op) + ": " + name + " must be a contiguous " + dtype_name(dtype) + " [" +
      std::to_string(c) + "] on " + device.str() + ", got " +
      (t.defined() ? std::string(dtype_name(t.dtype())) + " " + t.shape().str() + " on " +
                         t.device().str()
                   : std::string("an undefined tensor")));
}

}  // namespace

void accumulate_batch_stats(const BatchNormStats& stats, int64_t count, int64_t seen,
                            Tensor& acc_mean, Tensor& acc_m2) {
  if (!stats.mean.defined() || !stats.var.defined()) {
    throw std::invalid_argument(
        "accumulate_batch_stats: the statistics need mean and the float64 var of "
        "batch_norm_train");
  }
  const int64_t c = stats.mean.numel();
  const Device device = stats.mean.device();
  check_stats_tensor("accumulate_batch_stats", "acc_mean", acc_mean, DType::kFloat64, c, device);
  check_stats_tensor("accumulate_batch_stats", "acc_m2", acc_m2, DType::kFloat64, c, device);
  PW_KERNEL(device, batch_norm_accumulate)(stats.mean, stats.var, static_cast<double>(count),
                                           static_cast<double>(seen), acc_mean, acc_m2);
}

void commit_running_stats(const Tensor& mean, const Tensor& m2, int64_t count,
                          std::optional<double> momentum, Tensor& running_mean,
                          Tensor& running_var, Tensor& num_batches_tracked) {
  const char* op = "commit_running_stats";
  if (count < 1) {
    throw std::invalid_argument(std::string(op) + ": count must be >= 1, got " +
                                std::to_string(count));
  }
  if (!mean.defined() || !running_mean.defined()) {
    throw std::invalid_argument(std::string(op) + ": mean and running_mean are required");
  }
  const int64_t c = running_mean.numel();
  const Device device = running_mean.device();
  check_stats_tensor(op, "mean", mean, DType::kFloat64, c, device);
  check_stats_tensor(op, "m2", m2, DType::kFloat64, c, device);
  check_stats_tensor(op, "running_var", running_var, running_mean.dtype(), c, device);
  if (!num_batches_tracked.defined() || num_batches_tracked.dtype() != DType::kInt64 ||
      num_batches_tracked.numel() != 1 || num_batches_tracked.device() != device) {
    throw std::invalid_argument(
        std::string(op) + ": num_batches_tracked must be one int64 on " + device.str() + ", got " +
        (num_batches_tracked.defined()
             ? std::string(dtype_name(num_batches_tracked.dtype())) + " " +
                   num_batches_tracked.shape().str() + " on " + num_batches_tracked.device().str()
             : std::string("an undefined tensor")));
  }
  // Inside a graph capture, a commit after the step's values are gathered reads the step's
  // gate: a replay whose step failed commits nothing (DeviceGraph::set_gate).
  const DeviceGraph* graph = DeviceGraph::capturing_on(device);
  PW_KERNEL(device, batch_norm_commit)(mean, m2, static_cast<double>(count),
                                       momentum ? *momentum : -1.0, running_mean, running_var,
                                       num_batches_tracked, graph ? graph->gate(device) : nullptr);
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
