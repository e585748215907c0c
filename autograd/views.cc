// transpose, permute, contiguous as differentiable ops.
#include "autograd/views.h"

#include <utility>

#include "autograd/function_node.h"
#include "tensor/views.h"

namespace pipewright::autograd {
namespace {

/// The gradient of a permuted view: g permuted back. Transpose is the permutation that swaps
/// two dims (its own inverse).
class PermuteBackward final : public FunctionNode {
 public:
  PermuteBackward(const char* name, std::vector<int64_t> inverse)
      : name_(name), inverse_(std::move(inverse)) {}
  const char* name() const override { return name_; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    return {ops::permute(grads[0], inverse_).contiguous()};
  }

 private:
  const char* name_;
  std::vector<int64_t> inverse_;
};

class ContiguousBackward final : public FunctionNode {
 public:
  const char* name() const override { return "ContiguousBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    return {grads[0]};
  }
};

Tensor record_permute(const char* name, const Tensor& x, Tensor y, std::vector<int64_t> dims) {
  record_op({x}, {&y}, [&] {
    std::vector<int64_t> inverse(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) {
      const int64_t d = dims[i] < 0 ? dims[i] + x.dim() : dims[i];
      inverse[static_cast<size_t>(d)] = static_cast<int64_t>(i);
    }
    return std::make_shared<PermuteBackward>(name, std::move(inverse));
  });
  return y;
}

}  // namespace

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  Tensor y = ops::transpose(x, dim0, dim1);
  std::vector<int64_t> dims(static_cast<size_t>(x.dim()));
  for (size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<int64_t>(i);
  std::swap(dims[static_cast<size_t>(x.shape().wrap_dim(dim0))],
            dims[static_cast<size_t>(x.shape().wrap_dim(dim1))]);
  return record_permute("TransposeBackward", x, std::move(y), std::move(dims));
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  return record_permute("PermuteBackward", x, ops::permute(x, dims), dims);
}

Tensor contiguous(const Tensor& x) {
  Tensor y = own_handle(x.contiguous(), x);
  record_op({x}, {&y}, [] { return std::make_shared<ContiguousBackward>(); });
  return y;
}

}  // namespace pipewright::autograd
