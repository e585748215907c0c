// BatchNorm1d (torch.nn.BatchNorm1d), with a deferred mode for pipelines.
//
// Input [N, C] or [N, C, L]; statistics per channel over the M = N·L values of a batch.
//   training:  y = (x - mean_B) / sqrt(var_B + eps) · weight + bias with the batch's mean and
//              BIASED variance var_B = Σ (x - mean_B)² / M; then (when tracking and not
//              recomputing) num_batches_tracked += 1 and
//                running_mean = (1 - f)·running_mean + f·mean_B
//                running_var  = (1 - f)·running_var  + f·var_B·M/(M - 1)   (UNBIASED)
//              with f = momentum, or f = 1/num_batches_tracked when momentum is nullopt
//              (a cumulative moving average, PyTorch's momentum=None).
//   eval:      y = (x - running_mean) / sqrt(running_var + eps) · weight + bias
//              (batch statistics instead when track_running_stats = false).
// Parameters "weight" (ones), "bias" (zeros) when affine; buffers "running_mean" (zeros),
// "running_var" (ones), "num_batches_tracked" (int64 scalar 0) when track_running_stats.
//
// Note [Deferred BatchNorm]
// A pipeline splits a mini-batch of B samples into micro-batches that pass through the layer
// one at a time. Like torchgpipe's DeferredBatchNorm, each micro-batch is normalised with its
// own statistics (that is what the gradient needs), but the running statistics must change
// ONCE per mini-batch, exactly as plain BatchNorm on the whole mini-batch would change them.
// So while deferred (and training, and not recomputing), forward only merges each
// micro-batch's statistics, per channel and in float64, into the mean and the sum of squared
// deviations M2 of all samples so far (Chan et al.'s pairwise update: exact, no Σx² - M·mean²
// cancellation; one kernel, autograd::accumulate_batch_stats). commit_deferred() then applies
// one update with
//   mean over ALL samples,  var = M2 / (M - 1)   (unbiased),  num_batches_tracked += 1
// (one kernel, autograd::commit_running_stats: nothing read back by the host, momentum None
// included), and clears the accumulators. Not deferred, forward merges its one batch and
// commits at once: the same two kernels. Two flaws of torchgpipe's version are fixed: it
// committed the biased variance, and it committed only after `chunks` micro-batches (a
// mini-batch that yields fewer micro-batches leaked into the next step). Here the caller
// commits explicitly, once per mini-batch, whatever the number of micro-batches. A recompute
// (is_recomputing()) never accumulates, so checkpointing does not count a micro-batch twice.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nn/module.h"

namespace pipewright::nn {

class BatchNorm1d : public Module {
 public:
  /// Throws std::invalid_argument for num_features <= 0, eps <= 0 or a momentum outside [0, 1].
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true, TensorOptions options = {});

  using Module::forward;
  /// x [N, C] or [N, C, L] -> same shape. Throws std::invalid_argument naming the shape
  /// ("BatchNorm1d(num_features=1024): input has shape [32, 100], expected [N, 1024] or
  /// [N, 1024, L]"), and for a single value per channel in training.
  Tensor forward(const Tensor& x) override;
  /// "BatchNorm1d(1024, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)".
  std::string str() const override;

  /// Deferred mode (Note [Deferred BatchNorm]). Turning it off keeps anything accumulated
  /// for a later commit_deferred().
  void set_deferred(bool on) { deferred_ = on; }
  bool is_deferred() const { return deferred_; }
  /// Applies the accumulated micro-batches as ONE running-statistics update, then clears the
  /// accumulators. A no-op when nothing was accumulated.
  void commit_deferred();
  /// Drops what was accumulated since the last commit, leaving the running statistics as
  /// they are: for a pipelined step that failed midway, whose micro-batches must not count
  /// towards the next step's update. A no-op when nothing was accumulated.
  void discard_deferred();
  /// Number of samples·L accumulated since the last commit (0 when none).
  int64_t deferred_count() const { return acc_count_; }

  int64_t num_features() const { return num_features_; }
  double eps() const { return eps_; }
  std::optional<double> momentum() const { return momentum_; }
  /// Undefined when affine = false.
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  /// Undefined when track_running_stats = false.
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }
  const Tensor& num_batches_tracked() const { return num_batches_tracked_; }

 private:
  /// One running-statistics update from merged statistics (mean, M2) over `count` values.
  void commit(const Tensor& mean, const Tensor& m2, int64_t count);

  int64_t num_features_;
  double eps_;
  std::optional<double> momentum_;
  Tensor weight_, bias_;
  Tensor running_mean_, running_var_, num_batches_tracked_;
  bool deferred_ = false;
  Tensor acc_mean_, acc_m2_;  // float64 [C], defined once something is accumulated
  int64_t acc_count_ = 0;
};

}  // namespace pipewright::nn
