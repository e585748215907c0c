// Differentiable elementwise ops (float32 and float64).
//
// Same semantics, broadcasting and errors as their tensor/ops.h namesakes; in addition each
// records a node when should_record(inputs) (grad mode on and an input requires grad).
// Broadcasting (b of one element, or of a's trailing dims, or the other way round): the
// gradient of the broadcast operand is summed back to its own shape, like PyTorch.
#pragma once

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// a + b, a - b, a * b, a / b. Gradients: (g, g), (g, -g), (g·b, g·a), (g/b, -g·a/b²).
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

/// a + s, a * s (gradients g, g·s); a - s and a / s are written with them.
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
inline Tensor sub(const Tensor& a, double s) { return add(a, -s); }
inline Tensor div(const Tensor& a, double s) { return mul(a, 1.0 / s); }

/// -x (grad -g), eˣ (g·y), ln x (g/x), √x (g/(2y)), x² (2g·x), tanh x (g·(1-y²)),
/// sigmoid x = 1/(1+e⁻ˣ) (g·y·(1-y)), relu x = max(x, 0) (g·[y > 0]); y is the output.
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);

}  // namespace pipewright::autograd
