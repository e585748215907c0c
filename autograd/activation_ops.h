// Differentiable GELU and erf (tensor/gelu.h).
#pragma once

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// torch.erf. Gradient: g · 2/√π · e^(-x²).
Tensor erf(const Tensor& x);

/// torch.nn.functional.gelu(x, approximate="none" | "tanh") (ops::gelu). Gradient:
/// ops::gelu_backward(g, x), one fused kernel.
Tensor gelu(const Tensor& x, bool tanh_approximation = false);

}  // namespace pipewright::autograd
