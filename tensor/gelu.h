// The Gaussian error function and GELU (torch.erf, torch.nn.functional.gelu). Not
// differentiable: see autograd/activation_ops.h.
#pragma once

#include "tensor/tensor.h"

namespace pipewright::ops {

/// torch.erf: erf(x) = 2/√π ∫₀ˣ e^(-t²) dt, elementwise. Float32 / float64 (float32 on the
/// CPU through Eigen's rational approximation, a few ulp from the exact value).
Tensor erf(const Tensor& x);

/// torch.nn.functional.gelu(x, approximate): the Gaussian Error Linear Unit (Hendrycks &
/// Gimpel, 2016), elementwise.
///   tanh_approximation = false ("none", torch's default): x · Φ(x) = x/2 · (1 + erf(x/√2))
///   tanh_approximation = true  ("tanh", GPT-2's):  x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))
/// Float32 / float64; throws std::invalid_argument for another dtype.
Tensor gelu(const Tensor& x, bool tanh_approximation = false);

/// grad · gelu'(x), the same shape as x: Φ(x) + x φ(x) exactly, or the derivative of the tanh
/// form. Throws std::invalid_argument when grad and x differ in shape, dtype or device.
Tensor gelu_backward(const Tensor& grad, const Tensor& x, bool tanh_approximation = false);

}  // namespace pipewright::ops
