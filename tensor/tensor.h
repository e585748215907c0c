// Tensor: a strided view of a Storage, with dtype and device, plus the autograd fields.
//
// A Tensor is a cheap handle (std::shared_ptr<TensorImpl>); copying a Tensor shares the same
// impl, like PyTorch's Python objects. Views (slice, chunk, view/reshape of a contiguous tensor,
// detach) make a new impl over the same Storage: no bytes are copied, which is how a
// micro-batch costs nothing.
//
// Ops on tensors (add, matmul, ...) live in tensor/ops.h and are *not* differentiable; the
// differentiable versions used by models live in autograd/functions.h.
//
// Errors: shape/dtype/device mismatches throw std::invalid_argument naming both operands;
// out-of-range dimensions or indices throw std::out_of_range naming the value and the bound.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"
#include "tensor/storage.h"

namespace pipewright {

class Generator;  // tensor/generator.h

namespace autograd {
class Node;              // defined in autograd/node.h; tensor/ only holds pointers to it
struct BackwardOptions;  // autograd/engine.h
}

/// dtype and device for factories: Tensor::zeros({2, 3}, {.dtype = DType::kFloat64}).
struct TensorOptions {
  DType dtype = DType::kFloat32;
  Device device = Device::cpu(0);
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  std::vector<int64_t> strides;  // in elements
  int64_t offset = 0;            // in elements
  DType dtype = DType::kFloat32;

  // Autograd fields, owned by autograd/ (see autograd/node.h):
  bool requires_grad = false;                  // a leaf the user wants .grad for, or an op output
  std::shared_ptr<TensorImpl> grad;            // accumulated gradient of a leaf
  std::shared_ptr<autograd::Node> grad_fn;     // the op that produced this tensor, if recorded
  uint32_t output_nr = 0;                      // which output of grad_fn this is
};

class Tensor {
 public:
  /// An undefined tensor (defined() == false); most methods throw std::logic_error on it.
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (contiguous, on options.device; defined in tensor/factories.cc) ----
  // torch's factories (torch.empty, zeros, ones, full, arange, rand, randn, from_blob) with
  // one difference: the dtype is options.dtype, float32 unless given, also for arange of
  // integers (torch infers int64 there). Errors: std::invalid_argument naming the values (a
  // negative size, a value count that does not fill the shape, an integer dtype for
  // rand/randn, a step of 0 or of the wrong sign for arange, a misaligned blob).

  /// Uninitialised memory.
  static Tensor empty(const Shape& shape, TensorOptions options = {});
  static Tensor zeros(const Shape& shape, TensorOptions options = {});
  static Tensor ones(const Shape& shape, TensorOptions options = {});
  static Tensor full(const Shape& shape, double value, TensorOptions options = {});
  /// A rank-0 tensor holding `value`.
  static Tensor scalar(double value, TensorOptions options = {});
  /// [0, 1, ..., n-1] as a 1-D tensor (torch.arange(n)).
  static Tensor arange(int64_t n, TensorOptions options = {});
  /// start, start + step, ... while below end (above it for a negative step): ceil((end -
  /// start) / step) values, each start + i·step computed in double (torch.arange(start, end,
  /// step)). arange(0, 1, 0.25) -> [0, 0.25, 0.5, 0.75].
  static Tensor arange(double start, double end, double step = 1, TensorOptions options = {});
  /// U[0, 1) (torch.rand), drawn from `generator` (advancing it; same numbers on every
  /// device, tensor/generator.h), or from current_generator() without one. Floating dtypes.
  static Tensor rand(const Shape& shape, Generator& generator, TensorOptions options = {});
  static Tensor rand(const Shape& shape, TensorOptions options = {});
  /// N(0, 1) (torch.randn), drawn like rand.
  static Tensor randn(const Shape& shape, Generator& generator, TensorOptions options = {});
  static Tensor randn(const Shape& shape, TensorOptions options = {});
  /// Copies `values` (row-major) into a new tensor of `shape` on `device`; the dtype follows
  /// T (float, double, int64_t, BFloat16, Half: tensor/half.h).
  /// Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}).
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                            Device device = Device::cpu(0));
  /// A 1-D tensor of `values`.
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, Device device = Device::cpu(0)) {
    return from_vector(values, Shape{static_cast<int64_t>(values.size())}, device);
  }
  /// A tensor over memory the caller owns, without copying it (torch::from_blob): `data`
  /// holds shape.numel() row-major elements of options.dtype on options.device (a device
  /// pointer for CUDA), aligned to the element size, and must outlive the tensor and every
  /// view of it. Writes through the tensor change `data`. The allocator does not count it.
  /// Use from_vector, or from_blob(...).clone(), for a tensor that owns its copy.
  static Tensor from_blob(void* data, const Shape& shape, TensorOptions options = {});

  // ---- properties ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return checked()->shape; }
  int64_t dim() const { return shape().rank(); }
  /// Size of dimension d (negative counts from the end).
  int64_t size(int64_t d) const { return shape()[d]; }
  int64_t numel() const { return shape().numel(); }
  const std::vector<int64_t>& strides() const { return checked()->strides; }
  int64_t offset() const { return checked()->offset; }
  DType dtype() const { return checked()->dtype; }
  Device device() const { return checked()->storage->device(); }
  bool is_contiguous() const;
  /// numel() * element_size(dtype()).
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(dtype()); }
  const std::shared_ptr<Storage>& storage() const { return checked()->storage; }
  /// True when both view the same Storage.
  bool shares_storage(const Tensor& other) const { return storage() == other.storage(); }

  /// Pointer to the first element (storage + offset). T must match dtype(), else
  /// std::invalid_argument. On a CUDA tensor this is a device pointer.
  template <class T>
  T* data() const;
  void* raw_data() const;

  // ---- views (no copy) ----
  /// Rows [start, end) of dim 0. Throws std::out_of_range unless 0 <= start <= end <= size(0).
  Tensor slice(int64_t start, int64_t end) const;
  /// torch.chunk on dim 0: ceil(size(0)/n) rows per chunk, the last may be smaller, and
  /// never an empty chunk, so there may be fewer than n (7 rows, n 4 -> 2,2,2,1; 5 rows,
  /// n 4 -> 2,2,1; 2 rows, n 4 -> 1,1). Throws std::invalid_argument for n <= 0 or rank 0.
  std::vector<Tensor> chunk(int64_t n) const;
  /// Same elements, new shape; one dimension may be -1 (inferred). A view when contiguous,
  /// else a contiguous copy. Throws std::invalid_argument when numel differs.
  Tensor reshape(const Shape& shape) const;
  /// [N, ...] -> [N, prod(...)].
  Tensor flatten_from(int64_t start_dim = 1) const;

  // ---- copies ----
  /// This tensor if already contiguous, else a contiguous copy.
  Tensor contiguous() const;
  /// A contiguous copy with its own storage (no autograd history).
  Tensor clone() const;
  /// A copy on `device` (this tensor itself when already there).
  Tensor to(Device device) const;
  /// A copy converted to `dtype` (this tensor itself when already of that dtype), with
  /// static_cast's semantics (float -> int64 truncates toward zero); to and from bfloat16 /
  /// float16 through float32, rounding to nearest even (tensor/half.h), as PyTorch's .to().
  Tensor to(DType dtype) const;
  /// Copies `src` (same shape; any device and strides, dtype must match) into this tensor's
  /// memory, which must be contiguous (every view made here is). Throws std::invalid_argument.
  void copy_from(const Tensor& src);

  /// The single element of a one-element tensor, as double. Throws std::invalid_argument
  /// naming the shape otherwise.
  double item() const;
  /// All elements (row-major) copied to the host, converted to T (float, double, int64_t,
  /// BFloat16, Half; a 16-bit side through float32).
  template <class T>
  std::vector<T> to_vector() const;

  /// Human-readable: "tensor([[1, 2], [3, 4]], shape=[2, 2], dtype=float32, device=cpu:0)";
  /// long tensors are abbreviated with "...".
  std::string str() const;

  // ---- autograd (see autograd/) ----
  bool requires_grad() const { return checked()->requires_grad; }
  /// Marks a leaf tensor as wanting a gradient (like torch's requires_grad_). Returns *this.
  Tensor& set_requires_grad(bool requires_grad = true);
  /// The accumulated gradient of a leaf (undefined until a backward reaches it).
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  /// A view of the same data with no autograd history and requires_grad false.
  Tensor detach() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const { return checked()->grad_fn; }
  /// Runs backward from this one-element tensor (gradient 1); defined in autograd/ (link
  /// //autograd). Throws std::logic_error when it does not require grad, or when the graph
  /// was already freed by an earlier backward (pass retain_graph to run it twice).
  void backward() const;
  /// Runs backward with the given output gradient (same shape).
  void backward(const Tensor& grad_output) const;
  /// torch's tensor.backward(gradient, retain_graph): autograd::backward({*this},
  /// {grad_output}, {}, options), e.g. loss.backward({.retain_graph = true}) (include
  /// autograd/engine.h for BackwardOptions).
  void backward(const autograd::BackwardOptions& options) const;
  void backward(const Tensor& grad_output, const autograd::BackwardOptions& options) const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  /// True when both handles share one impl (the same tensor, not just equal values).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  TensorImpl* checked() const;
  std::shared_ptr<TensorImpl> impl_;
};

/// Concatenates along dim 0 (all on one device, same dtype and trailing shape; throws
/// std::invalid_argument naming the first mismatching pair). The result is on tensors[0]'s device.
Tensor cat(const std::vector<Tensor>& tensors);

std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace pipewright
