// erf, gelu, gelu_backward: validate, allocate, call the device's kernel.
#include "tensor/gelu.h"

#include "tensor/kernels.h"
#include "tensor/op_checks.h"

namespace pipewright::ops {

Tensor erf(const Tensor& x) {
  detail::check_floating("erf", x);
  const Tensor xc = x.contiguous();
  Tensor out = detail::empty_like(xc);
  PW_KERNEL(x.device(), unary)(UnaryOp::kErf, xc, out);
  return out;
}

Tensor gelu(const Tensor& x, bool tanh_approximation) {
  detail::check_floating("gelu", x);
  const Tensor xc = x.contiguous();
  Tensor out = detail::empty_like(xc);
  PW_KERNEL(x.device(), gelu)(xc, tanh_approximation, out);
  return out;
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, bool tanh_approximation) {
  detail::check_like("gelu_backward", grad, x);
  detail::check_floating("gelu_backward", x);
  detail::check_same_shape("gelu_backward", grad, x);
  const Tensor gc = grad.contiguous(), xc = x.contiguous();
  Tensor out = detail::empty_like(xc);
  PW_KERNEL(x.device(), gelu_backward)(gc, xc, tanh_approximation, out);
  return out;
}

}  // namespace pipewright::ops
