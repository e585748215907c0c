// Differentiable batch normalisation (the op behind nn::BatchNorm1d).
//
// Layout: x is [N, C] or [N, C, L]; statistics are per channel c, over the M = N·L values of
// that channel. gamma (weight) and beta (bias) are [C], or undefined for affine = false.
// Running statistics are NOT updated here: the module decides when (and whether, e.g. not
// while recomputing) to update them from the returned batch statistics.
#pragma once

#include <optional>

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// The batch statistics a training-mode forward used, per channel [C].
struct BatchNormStats {
  Tensor mean;    // Σ x / M, in x's dtype
  Tensor invstd;  // 1 / sqrt(biased variance + eps), in x's dtype
  Tensor var;     // biased variance Σ (x - mean)² / M, float64 as the kernel accumulated it
};

/// Training mode (torch.nn.functional.batch_norm(training=True)):
///   y = (x - mean) · invstd · gamma + beta  with the batch's own mean and biased variance.
/// Writes the statistics to *stats when given. Gradients (one node; x, gamma and beta all in
/// zero-bubble's B: Note [What W takes], engine.cc), x̂ = (x - mean)·invstd:
///   dbeta = Σ g,  dgamma = Σ g·x̂,  dx = gamma·invstd/M · (M·g - Σ g - x̂ · Σ g·x̂).
/// Throws std::invalid_argument naming the shapes when x is not [N, C] / [N, C, L] or gamma /
/// beta are not [C], and when a channel has a single value (M == 1), like PyTorch.
Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                        BatchNormStats* stats = nullptr);

/// Batch statistics merged over micro-batches (Note [Deferred BatchNorm], nn/batch_norm.h), in
/// place and in double, one kernel launch: acc_mean and acc_m2 (float64 [C] on the statistics'
/// device) describe `seen` values per channel; `stats` (from a batch_norm_train over `count`
/// values per channel) are merged in by Chan et al.'s pairwise update (no Σx² - M·mean²
/// cancellation): with d = mean - acc_mean and n = seen + count,
///   acc_mean += d·count/n,   acc_m2 += var·count + d²·seen·count/n.
/// Start from zeros with seen = 0. Not differentiable. Throws std::invalid_argument naming the
/// tensors when stats.var is undefined, or acc_mean / acc_m2 are not contiguous float64 [C] on
/// that device.
void accumulate_batch_stats(const BatchNormStats& stats, int64_t count, int64_t seen,
                            Tensor& acc_mean, Tensor& acc_m2);

/// The running statistics' update from merged statistics over `count` values per channel
/// (torch.nn.BatchNorm1d's, in double, one kernel launch, no read by the host):
///   f = momentum, or 1 / (num_batches_tracked + 1) without one (the cumulative average);
///   running_mean = (1 - f)·running_mean + f·mean,
///   running_var = (1 - f)·running_var + f·m2 / (count - 1)   (unbiased; m2 / count for 1),
///   num_batches_tracked += 1.
/// mean and m2 float64 [C]; running_mean and running_var [C] of one floating dtype on mean's
/// device; num_batches_tracked one int64 there (shape [] as torch's, or [1]). Throws
/// std::invalid_argument naming the tensors otherwise, or when count < 1.
void commit_running_stats(const Tensor& mean, const Tensor& m2, int64_t count,
                          std::optional<double> momentum, Tensor& running_mean,
                          Tensor& running_var, Tensor& num_batches_tracked);

/// Eval mode: y = (x - running_mean) / sqrt(running_var + eps) · gamma + beta, the running
/// statistics being constants [C]. Gradients: dx = g·gamma/sqrt(rv + eps), dgamma = Σ g·x̂,
/// dbeta = Σ g. Same shape errors.
Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, double eps);

}  // namespace pipewright::autograd
