// Differentiable matrix products: matmul and linear (the fully connected layer's op).
#pragma once

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// op(a) · op(b) for 2-D a, b, op(x) = xᵀ when the flag is set (torch.matmul on 2-D operands,
/// with the transposes folded into the GEMM). Shapes: op(a) [M, K], op(b) [K, N] -> [M, N];
/// throws std::invalid_argument naming both shapes when the inner sizes differ.
/// Gradients (C = op(a)·op(b), G = dC): d op(a) = G·op(b)ᵀ, d op(b) = op(a)ᵀ·G.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

/// torch.nn.functional.linear: y = x·Wᵀ + b, recorded as ONE node.
///   x [*, in] (any leading dims, flattened to [N, in] and restored), weight [out, in],
///   bias [out] or undefined -> y [*, out].
/// Gradients, split for zero-bubble schedules (Note [Input-grad and weight-grad halves]):
///   B (input-grad):  dX = dY·W
///   W (weight-grad): dW = dYᵀ·X,  db = Σ_rows dY
/// Throws std::invalid_argument naming the shapes when x's last dim differs from in_features,
/// weight is not 2-D or bias is not [out].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace pipewright::autograd
