// transpose, permute, expand: new impls over the same storage (see views.h).
#include "tensor/views.h"

#include <memory>
#include <stdexcept>
#include <string>

#include "tensor/op_checks.h"

namespace pipewright::ops {
namespace {

/// x's storage, offset and dtype with another shape and strides.
Tensor restrided(const Tensor& x, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.storage();
  impl->shape = Shape(std::move(sizes));
  impl->strides = std::move(strides);
  impl->offset = x.offset();
  impl->dtype = x.dtype();
  return Tensor(std::move(impl));
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  detail::check_defined("transpose", x);
  const int64_t a = x.shape().wrap_dim(dim0), b = x.shape().wrap_dim(dim1);
  std::vector<int64_t> sizes = x.shape().dims(), strides = x.strides();
  std::swap(sizes[a], sizes[b]);
  std::swap(strides[a], strides[b]);
  return restrided(x, std::move(sizes), std::move(strides));
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  detail::check_defined("permute", x);
  const int64_t rank = x.dim();
  auto fail = [&] {
    throw std::invalid_argument("permute: dims " + dims_str(dims) +
                                " is not a permutation of the dims of " + detail::describe(x));
  };
  if (static_cast<int64_t>(dims.size()) != rank) fail();
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  std::vector<int64_t> sizes, strides;
  for (int64_t d : dims) {
    const int64_t w = d < 0 ? d + rank : d;
    if (w < 0 || w >= rank || seen[w]) fail();
    seen[w] = true;
    sizes.push_back(x.size(w));
    strides.push_back(x.strides()[w]);
  }
  return restrided(x, std::move(sizes), std::move(strides));
}

Tensor expand(const Tensor& x, const Shape& shape) {
  detail::check_defined("expand", x);
  const int64_t rank = shape.rank(), lead = rank - x.dim();
  auto fail = [&] {
    throw std::invalid_argument("expand: cannot expand " + detail::describe(x) + " to " +
                                shape.str());
  };
  if (lead < 0) fail();
  std::vector<int64_t> sizes(static_cast<size_t>(rank)), strides(static_cast<size_t>(rank), 0);
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t target = shape.dims()[d];
    if (d < lead) {
      if (target < 0) fail();
      sizes[d] = target;  // a new leading dim: stride 0
      continue;
    }
    const int64_t own = x.size(d - lead);
    if (target == -1 || target == own) {
      sizes[d] = own;
      strides[d] = x.strides()[d - lead];
    } else if (own == 1 && target >= 0) {
      sizes[d] = target;
    } else {
      fail();
    }
  }
  return restrided(x, std::move(sizes), std::move(strides));
}

}  // namespace pipewright::ops
