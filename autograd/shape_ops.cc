// Differentiable reshape, slice/chunk, cat and device copies.
#include "autograd/shape_ops.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "autograd/function_node.h"
#include "tensor/ops.h"

namespace pipewright::autograd {
namespace {

class ReshapeBackward final : public FunctionNode {
 public:
  explicit ReshapeBackward(Shape input_shape) : input_shape_(std::move(input_shape)) {}
  const char* name() const override { return "ReshapeBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    return {grads[0].reshape(input_shape_)};
  }

 private:
  Shape input_shape_;
};

/// The gradient of row ranges taken from one input (slice: one range; chunk: one per output):
/// zeros of the input's shape, each output's gradient copied into its rows.
class RowsBackward final : public FunctionNode {
 public:
  RowsBackward(const char* name, const Tensor& x, std::vector<std::pair<int64_t, int64_t>> rows)
      : name_(name), input_shape_(x.shape()), options_(options_of(x)), rows_(std::move(rows)) {}
  const char* name() const override { return name_; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    Tensor gx = Tensor::zeros(input_shape_, options_);
    for (size_t k = 0; k < rows_.size(); ++k) {
      if (!grads[k].defined()) continue;
      Tensor rows = gx.slice(rows_[k].first, rows_[k].second);
      rows.copy_from(grads[k]);
    }
    return {gx};
  }

 private:
  const char* name_;
  Shape input_shape_;
  TensorOptions options_;
  std::vector<std::pair<int64_t, int64_t>> rows_;
};

class CatBackward final : public FunctionNode {
 public:
  explicit CatBackward(std::vector<int64_t> sizes) : sizes_(std::move(sizes)) {}
  const char* name() const override { return "CatBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads,
                               const std::vector<bool>& wanted) override {
    std::vector<Tensor> out(sizes_.size());
    int64_t start = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      if (wanted[i]) out[i] = grads[0].slice(start, start + sizes_[i]);
      start += sizes_[i];
    }
    return out;
  }

 private:
  std::vector<int64_t> sizes_;
};

class ToDeviceBackward final : public FunctionNode {
 public:
  explicit ToDeviceBackward(Device source) : source_(source) {}
  const char* name() const override { return "ToDeviceBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    return {grads[0].to(source_)};
  }

 private:
  Device source_;
};

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  Tensor y = own_handle(x.reshape(shape), x);
  record_op({x}, {&y}, [&] { return std::make_shared<ReshapeBackward>(x.shape()); });
  return y;
}

Tensor flatten(const Tensor& x, int64_t start_dim) {
  const int64_t start = x.shape().wrap_dim(start_dim);
  std::vector<int64_t> dims(x.shape().dims().begin(), x.shape().dims().begin() + start);
  int64_t rest = 1;
  for (int64_t d = start; d < x.dim(); ++d) rest *= x.size(d);
  dims.push_back(rest);
  return reshape(x, Shape(dims));
}

Tensor slice(const Tensor& x, int64_t start, int64_t end) {
  Tensor y = own_handle(x.slice(start, end), x);
  record_op({x}, {&y}, [&] {
    return std::make_shared<RowsBackward>("SliceBackward", x,
                                          std::vector<std::pair<int64_t, int64_t>>{{start, end}});
  });
  return y;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t n) {
  std::vector<Tensor> chunks = x.chunk(n);
  std::vector<std::pair<int64_t, int64_t>> rows;
  std::vector<Tensor*> outputs;
  int64_t start = 0;
  for (Tensor& c : chunks) {
    c = own_handle(c, x);
    rows.emplace_back(start, start + c.size(0));
    start += c.size(0);
    outputs.push_back(&c);
  }
  record_op({x}, outputs,
            [&] { return std::make_shared<RowsBackward>("ChunkBackward", x, std::move(rows)); });
  return chunks;
}

Tensor cat(const std::vector<Tensor>& tensors) {
  Tensor y = pipewright::cat(tensors);
  if (tensors.size() == 1) y = own_handle(y, tensors[0]);
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) sizes.push_back(t.size(0));
  record_op(tensors, {&y}, [&] { return std::make_shared<CatBackward>(std::move(sizes)); });
  return y;
}

Tensor to(const Tensor& x, Device device) {
  Tensor y = own_handle(x.to(device), x);
  record_op({x}, {&y}, [&] { return std::make_shared<ToDeviceBackward>(x.device()); });
  return y;
}

}  // namespace pipewright::autograd
