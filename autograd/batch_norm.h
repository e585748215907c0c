// Differentiable batch normalisation (the op behind nn::BatchNorm1d).
//
// Layout: x is [N, C] or [N, C, L]; statistics are per channel c, over the M = N·L values of
// that channel. gamma (weight) and beta (bias) are [C], or undefined for affine = false.
// Running statistics are NOT updated here: the module decides when (and whether, e.g. not
// while recomputing) to update them from the returned batch statistics.
#pragma once

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
/// Writes the statistics to *stats when given. Gradients (one node; B half: x, W half: gamma,
/// beta), x̂ = (x - mean)·invstd:
///   dbeta = Σ g,  dgamma = Σ g·x̂,  dx = gamma·invstd/M · (M·g - Σ g - x̂ · Σ g·x̂).
/// Throws std::invalid_argument naming the shapes when x is not [N, C] / [N, C, L] or gamma /
/// beta are not [C], and when a channel has a single value (M == 1), like PyTorch.
Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                        BatchNormStats* stats = nullptr);

/// Deferred BatchNorm's running sums over micro-batches (Note [Deferred BatchNorm],
/// nn/batch_norm.h), in place and in double, one kernel launch:
///   sum += count · stats.mean,   sum_sq += count · (stats.var + stats.mean²)
/// where stats come from a batch_norm_train over `count` values per channel. sum and sum_sq
/// are float64 [C] on the statistics' device. Not differentiable. Throws
/// std::invalid_argument naming the tensors when stats.var is undefined, or sum / sum_sq are
/// not float64 [C] on that device.
void accumulate_batch_stats(const BatchNormStats& stats, int64_t count, Tensor& sum,
                            Tensor& sum_sq);

/// Eval mode: y = (x - running_mean) / sqrt(running_var + eps) · gamma + beta, the running
/// statistics being constants [C]. Gradients: dx = g·gamma/sqrt(rv + eps), dgamma = Σ g·x̂,
/// dbeta = Σ g. Same shape errors.
Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, double eps);

}  // namespace pipewright::autograd
