// Differentiable loss functions: mean squared error and cross-entropy (PyTorch semantics).
#pragma once

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// How a per-element (or per-sample) loss is reduced: PyTorch's reduction='mean'|'sum'|'none'.
enum class Reduction { kMean, kSum, kNone };

/// "mean", "sum", "none".
const char* reduction_name(Reduction r);

/// torch.nn.functional.mse_loss: (input - target)² reduced (mean over all elements, sum, or
/// none -> input's shape). Both operands may require grad. Shapes must be equal, else
/// std::invalid_argument naming both. Gradient (mean): 2·(input - target)·g / numel.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);

/// torch.nn.functional.cross_entropy on logits [N, C] (float32/float64) with int64 class
/// targets [N] in [0, C), on the logits' device, computed from log_softmax (numerically
/// stable). With label smoothing ε (0 <= ε <= 1) the target distribution is
/// q = (1-ε)·onehot + ε/C, so loss_i = -(1-ε)·logp[i, t_i] - ε/C · Σ_c logp[i, c].
/// Reduction: mean = Σ_i loss_i / N (PyTorch's, without class weights), sum, or none -> [N].
/// Recorded as ONE node: d logits = g_i · (softmax(logits)_i - q_i).
/// Throws std::invalid_argument naming the shapes/dtypes/devices or ε when invalid, and
/// std::out_of_range naming a target outside [0, C).
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     Reduction reduction = Reduction::kMean, double label_smoothing = 0.0);

}  // namespace pipewright::autograd
