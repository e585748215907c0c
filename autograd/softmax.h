// Differentiable softmax and log-softmax over the last dimension.
#pragma once

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// softmax(x)_i = e^{x_i} / Σ_j e^{x_j} over the last dim (torch.softmax(x, -1)); x of
/// rank >= 1, float32/float64. Numerically stable (the row max is subtracted).
/// Gradient: dx = y ⊙ (g - Σ g ⊙ y), y the output.
Tensor softmax(const Tensor& x);
/// log_softmax(x)_i = x_i - log Σ_j e^{x_j} (torch.log_softmax(x, -1)).
/// Gradient: dx = g - e^y ⊙ Σ g, y the output.
Tensor log_softmax(const Tensor& x);

}  // namespace pipewright::autograd
