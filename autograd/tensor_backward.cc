// Tensor::backward(), declared in tensor/tensor.h and defined here so that tensor/ does not
// depend on autograd/ (a binary that calls it links //autograd).
#include "autograd/engine.h"
#include "tensor/tensor.h"

namespace pipewright {

void Tensor::backward() const { autograd::backward({*this}, {Tensor()}); }

void Tensor::backward(const Tensor& grad_output) const {
  autograd::backward({*this}, {grad_output});
}

void Tensor::backward(const autograd::BackwardOptions& options) const {
  autograd::backward({*this}, {Tensor()}, {}, options);
}

void Tensor::backward(const Tensor& grad_output, const autograd::BackwardOptions& options) const {
  autograd::backward({*this}, {grad_output}, {}, options);
}

}  // namespace pipewright
