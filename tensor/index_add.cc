// index_add_: validate, call the device's kernel.
#include "tensor/index_add.h"

#include <stdexcept>
#include <string>

#include "tensor/kernels.h"
#include "tensor/op_checks.h"

namespace pipewright::ops {

void index_add_(Tensor& dst, const Tensor& index, const Tensor& src) {
  detail::check_like("index_add_", dst, src);
  detail::check_floating("index_add_", dst);
  detail::check_defined("index_add_", index);
  Shape expected = dst.dim() == 0 ? Shape{} : dst.shape();
  if (dst.dim() > 0 && index.dim() == 1) expected.at(0) = index.size(0);
  if (dst.dim() == 0 || index.dim() != 1 || index.dtype() != DType::kInt64 ||
      index.device() != dst.device() || src.shape() != expected || !dst.is_contiguous()) {
    throw std::invalid_argument(
        "index_add_: expected a contiguous dst [N, ...], a 1-D int64 index [K] on its device "
        "and src [K, ...] with dst's trailing dims; got dst " + detail::describe(dst) +
        (dst.defined() && !dst.is_contiguous() ? " (not contiguous)" : "") + ", index " +
        detail::describe(index) + ", src " + detail::describe(src));
  }
  if (index.numel() == 0) return;
  PW_KERNEL(dst.device(), index_add)(dst, index.contiguous(), src.contiguous());
}

}  // namespace pipewright::ops
