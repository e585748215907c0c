// Differentiable LayerNorm and RMSNorm over the last dim, each ONE node with fused kernels
// (tensor/normalization.h).
#pragma once

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// torch.nn.functional.layer_norm(x, [C], weight, bias, eps): x [*, C], weight and bias [C]
/// or undefined. Gradients, split for zero-bubble schedules (Note [Input-grad and weight-grad
/// halves], node.h):
///   B (input-grad):  dx = rstd · (ĝ - mean_C(ĝ) - x̂ · mean_C(ĝ x̂)),  ĝ = g · w
///   W (weight-grad): dw = Σ_rows g · x̂,  db = Σ_rows g
/// Saves x, weight and the per-row mean and rstd. Errors as ops::layer_norm.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

/// torch.nn.functional.rms_norm(x, [C], weight, eps): y = x / √(mean_C(x²) + eps) · w.
/// Gradients as layer_norm's without the centring term (B: dx; W: dw). Errors as
/// ops::rms_norm.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);

}  // namespace pipewright::autograd
