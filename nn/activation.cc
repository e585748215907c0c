// ReLU, Tanh, Sigmoid, Flatten: thin wrappers over the autograd ops.
#include "nn/activation.h"

#include "autograd/elementwise.h"
#include "autograd/shape_ops.h"

namespace pipewright::nn {

Tensor ReLU::forward(const Tensor& x) { return autograd::relu(x); }
Tensor Tanh::forward(const Tensor& x) { return autograd::tanh(x); }
Tensor Sigmoid::forward(const Tensor& x) { return autograd::sigmoid(x); }
Tensor Flatten::forward(const Tensor& x) { return autograd::flatten(x, start_dim_); }

std::string Flatten::str() const {
  return "Flatten(start_dim=" + std::to_string(start_dim_) + ")";
}

}  // namespace pipewright::nn
