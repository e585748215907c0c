// BatchNorm1d (see batch_norm.h, Note [Deferred BatchNorm]).
#include "nn/batch_norm.h"

#include <sstream>
#include <stdexcept>

#include "autograd/batch_norm.h"
#include "autograd/grad_mode.h"
#include "tensor/check.h"
#include "tensor/ops.h"

namespace pipewright::nn {

BatchNorm1d::BatchNorm1d(int64_t num_features, double eps, std::optional<double> momentum,
                         bool affine, bool track_running_stats, TensorOptions options)
    : num_features_(num_features), eps_(eps), momentum_(momentum) {
  if (num_features <= 0 || !(eps > 0.0) ||
      (momentum && !(*momentum >= 0.0 && *momentum <= 1.0))) {
    std::ostringstream os;
    os << "BatchNorm1d: need num_features > 0, eps > 0 and momentum in [0, 1], got "
       << "num_features=" << num_features << ", eps=" << eps << ", momentum="
       << (momentum ? std::to_string(*momentum) : std::string("None"));
    throw std::invalid_argument(os.str());
  }
  const Shape c{num_features};
  if (affine) {
    weight_ = register_parameter("weight", Tensor::ones(c, options));
    bias_ = register_parameter("bias", Tensor::zeros(c, options));
  }
  if (track_running_stats) {
    running_mean_ = register_buffer("running_mean", Tensor::zeros(c, options));
    running_var_ = register_buffer("running_var", Tensor::ones(c, options));
    num_batches_tracked_ = register_buffer(
        "num_batches_tracked", Tensor::zeros(Shape{}, {DType::kInt64, options.device}));
  }
}

Tensor BatchNorm1d::forward(const Tensor& x) {
  check_not_moved_from();
  if ((x.dim() != 2 && x.dim() != 3) || x.size(1) != num_features_) {
    const std::string c = std::to_string(num_features_);
    throw std::invalid_argument("BatchNorm1d(num_features=" + c + "): input has shape " +
                                x.shape().str() + ", expected [N, " + c + "] or [N, " + c +
                                ", L]");
  }
  const bool tracking = running_mean_.defined();
  if (weight_.defined()) {
    check_like(str(), "input", x, "weight", weight_);
  } else if (tracking) {
    check_like(str(), "input", x, "running_mean", running_mean_);
  }
  if (!is_training() && tracking) {
    return autograd::batch_norm_eval(x, weight_, bias_, running_mean_, running_var_, eps_);
  }
  autograd::BatchNormStats stats;
  Tensor y = autograd::batch_norm_train(x, weight_, bias_, eps_, &stats);
  if (!is_training() || !tracking || autograd::is_recomputing()) return y;

  // Per-channel float64 mean and biased variance of this batch.
  //
  // Note [Running variance from the kernel's double variance]
  // The kernel accumulates the variance in double and returns it as such (stats.var). It
  // must not be rebuilt from invstd as 1/invstd² - eps: invstd is rounded to x's dtype, so in
  // float32 1/invstd² carries an absolute error of ~1e-7·(var + eps), which swamps var when
  // var ≪ eps (e.g. var 1e-12, eps 1e-3: the result was 3.7e-11, 100 times too large, and
  // could as well have been negative). Same on CPU and GPU: both kernels fill stats.var.
  autograd::NoGradGuard no_grad;
  const int64_t count = x.numel() / num_features_;
  if (!deferred_) {  // this batch alone: merge it into zeros and commit at once
    const TensorOptions f64{DType::kFloat64, x.device()};
    Tensor mean = Tensor::zeros({num_features_}, f64), m2 = Tensor::zeros({num_features_}, f64);
    autograd::accumulate_batch_stats(stats, count, 0, mean, m2);
    commit(mean, m2, count);
    return y;
  }
  // Merge this micro-batch for commit_deferred(), one launch (a layer's micro-batches all run
  // on its stage's device).
  if (acc_count_ == 0) {
    const TensorOptions f64{DType::kFloat64, x.device()};
    acc_mean_ = Tensor::zeros({num_features_}, f64);
    acc_m2_ = Tensor::zeros({num_features_}, f64);
  }
  autograd::accumulate_batch_stats(stats, count, acc_count_, acc_mean_, acc_m2_);
  acc_count_ += count;
  return y;
}

void BatchNorm1d::commit_deferred() {
  if (acc_count_ == 0) return;
  autograd::NoGradGuard no_grad;
  commit(acc_mean_, acc_m2_, acc_count_);
  discard_deferred();
}

void BatchNorm1d::discard_deferred() {
  acc_mean_ = acc_m2_ = Tensor();
  acc_count_ = 0;
}

void BatchNorm1d::commit(const Tensor& mean, const Tensor& m2, int64_t count) {
  // Where the running statistics live (the statistics were made where the input was).
  const Device device = running_mean_.device();
  autograd::commit_running_stats(mean.to(device), m2.to(device), count, momentum_, running_mean_,
                                 running_var_, num_batches_tracked_);
}

std::string BatchNorm1d::str() const {
  std::ostringstream os;
  os << "BatchNorm1d(" << num_features_ << ", eps=" << eps_ << ", momentum=";
  if (momentum_) {
    os << *momentum_;
  } else {
    os << "None";
  }
  os << ", affine=" << (weight_.defined() ? "true" : "false")
     << ", track_running_stats=" << (running_mean_.defined() ? "true" : "false") << ")";
  return os.str();
}

}  // namespace pipewright::nn
