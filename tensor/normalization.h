// LayerNorm and RMSNorm over the last dim, forward with the statistics a backward needs, and
// that backward. One fused kernel each way. Not differentiable: see autograd/layer_norm.h.
#pragma once

#include "tensor/tensor.h"

namespace pipewright::ops {

/// What the forward returns: y (x's shape) and, per row of the last dim, the statistics
/// (shape x.shape() without its last dim, x's dtype): mean (undefined for RMSNorm) and rstd.
struct NormForward {
  Tensor y;
  Tensor mean;
  Tensor rstd;
};

/// torch.nn.functional.layer_norm(x, [C], weight, bias, eps) over the last dim C:
///   mean = Σ x / C,  rstd = 1 / √(Σ (x - mean)² / C + eps),  y = (x - mean) · rstd · w + b
/// (the biased variance, as torch). weight and bias [C] or undefined (1 and 0).
/// Throws std::invalid_argument naming the shapes when x has rank 0 or weight / bias are not
/// [C], and for a non-floating dtype, mismatched dtypes or devices.
NormForward layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);

/// torch.nn.functional.rms_norm(x, [C], weight, eps) (Zhang & Sennrich, 2019): no centring,
///   rstd = 1 / √(Σ x² / C + eps),  y = x · rstd · w.   Errors as layer_norm.
NormForward rms_norm(const Tensor& x, const Tensor& weight, double eps);

struct NormGrads {
  Tensor x;       // x's shape
  Tensor weight;  // [C]
  Tensor bias;    // [C]
};

/// The gradients of layer_norm (rms = false) or rms_norm (rms = true) given grad_y and the
/// forward's x, weight and statistics; only the wanted ones are computed (the others are
/// undefined), so the input-grad half and the weight-grad half can run apart (Note
/// [Input-grad and weight-grad halves], autograd/node.h). With x̂ = (x - mean) · rstd and
/// ĝ = grad_y · w:
///   grad_x = rstd · (ĝ - mean_C(ĝ) - x̂ · mean_C(ĝ x̂))   (RMSNorm: without mean_C(ĝ))
///   grad_weight = Σ_rows grad_y · x̂,   grad_bias = Σ_rows grad_y
NormGrads norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight,
                        const NormForward& forward, bool rms, bool want_x, bool want_weight,
                        bool want_bias);

}  // namespace pipewright::ops
