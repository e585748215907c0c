// GradSlot and accumulate_into_grad() (see grad_buffer.h).
#include "autograd/grad_buffer.h"

#include <stdexcept>

#include "tensor/ops.h"

namespace pipewright::autograd {

bool is_exclusive(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1 && t.is_contiguous();
}

void GradSlot::add(Tensor g) {
  if (!value_.defined()) {
    value_ = std::move(g);
  } else if (is_exclusive(value_)) {
    ops::add_(value_, g);
  } else {
    value_ = ops::add(value_, g);
  }
}

Tensor grad_to_accumulate_into(const TensorImpl& leaf, const Shape& shape, DType dtype,
                               Device device) {
  const std::shared_ptr<TensorImpl>& grad = leaf.grad;
  // Checked on the leaf's own pointer: making a Tensor handle first would add a reference.
  if (grad == nullptr || grad.use_count() != 1 || grad->storage.use_count() != 1) return {};
  Tensor t(grad);
  if (!t.is_contiguous() || t.shape() != shape || t.dtype() != dtype || t.device() != device) {
    return {};
  }
  return t;
}

void accumulate_into_grad(TensorImpl& leaf, Tensor g) {
  if (leaf.grad == nullptr) {
    leaf.grad = is_exclusive(g) ? g.impl_ptr() : g.clone().impl_ptr();
    return;
  }
  Tensor grad(leaf.grad);
  if (grad.shape() != g.shape()) {
    throw std::invalid_argument("backward: the existing .grad has shape " + grad.shape().str() +
                                " but the new gradient has shape " + g.shape().str());
  }
  if (!grad.is_contiguous()) {
    // A user-set, non-contiguous .grad: add_ needs a contiguous destination.
    leaf.grad = ops::add(grad, g).impl_ptr();
    return;
  }
  ops::add_(grad, g);
}

}  // namespace pipewright::autograd
