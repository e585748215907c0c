// Tensor: views, copies between devices and dtypes, element access. Factories live in
// factories.cc, printing (str, operator<<) in tensor_format.cc.
#include "tensor/tensor.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "tensor/deferred_check.h"
#include "tensor/kernels.h"
#include "tensor/stream.h"

namespace pipewright {

namespace {

std::string describe(const Tensor& t) {
  return t.shape().str() + " " + dtype_name(t.dtype()) + " on " + t.device().str();
}

/// A new impl over `storage` with the given layout.
Tensor make_view(const std::shared_ptr<Storage>& storage, Shape shape,
                 std::vector<int64_t> strides, int64_t offset, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// Note [Copies between devices]
// Tensor::to(device) and copy_from between devices order the copy against the calling
// thread's current streams, like PyTorch's copy_ (aten/src/ATen/native/cuda/Copy.cu):
//
//   CPU  -> CPU    memcpy.
//   CPU  -> GPU j  on current(j), which owns dst (to()); the backend stages the host bytes
//                  in pinned memory before returning, so the host source is free at once.
//   GPU i -> CPU   on current(i); the backend waits for the copy: the host reads dst. Any
//                  deferred check of the thread is then read (Note [Deferred checks]).
//   GPU i -> GPU j on current(i), the *source's* stream, with a two-way barrier:
//
//     current(j): ──(pending work on dst's device)──● dst_ready ──────────└wait─► (users of y)
//                                                   ╎                      ╎
//     current(i): ──(writes x)──────────────────────└wait─►══copy x→y══● copied
//
//     - the copy starts after pending work on *both* devices' current streams: x is written,
//       and nobody on j still reads or writes the memory y is written into;
//     - current(j) waits for `copied`, so whatever the caller issues on j next sees y;
//       current(i) runs the copy itself, so a later in-place write of x on i cannot overtake
//       it (a record_stream alone would protect only x's memory from reuse, not its values).
//   Both blocks are also recorded on the stream that carries the copy (record_stream, a no-op
//   for the block's own stream): x or y may belong to another stream (a pipeline worker's,
//   or copy_from's destination), whose allocator would otherwise reuse the block the moment
//   it is freed, while the copy may still read or write it. Nothing blocks the host.
//
// Why both ends: a copy issued for a default stream may run on *j*'s legacy default stream;
// synchronizing only i's would then return from to() with the copy still running, unordered
// with i (tests/cuda:cross_stream_order_test).

/// dst.nbytes() bytes from src into dst, both contiguous, on different devices. Note [Copies
/// between devices].
void copy_across_devices(const Tensor& dst, const Tensor& src) {
  const size_t bytes = dst.nbytes();
  const Device dst_device = dst.device(), src_device = src.device();
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst.raw_data(), src.raw_data(), bytes);
    return;
  }
  DeviceBackend& cuda = backend_for(DeviceType::kCUDA);
  if (src_device.is_cpu()) {  // host -> GPU
    const Stream stream = Stream::current(dst_device);
    cuda.copy(dst.raw_data(), dst_device, src.raw_data(), src_device, bytes, dst_device.index,
              stream.handle());
    record_stream(dst, stream);
    return;
  }
  const Stream stream = Stream::current(src_device);
  if (dst_device.is_cpu()) {  // GPU -> host: done when this returns (the backend waits)
    cuda.copy(dst.raw_data(), dst_device, src.raw_data(), src_device, bytes, src_device.index,
              stream.handle());
    raise_deferred_checks();  // Note [Deferred checks]: the thread has waited anyway
    return;
  }
  const Stream dst_stream = Stream::current(dst_device);
  Event dst_ready(dst_device);
  dst_ready.record(dst_stream);
  dst_ready.wait(stream);
  cuda.copy(dst.raw_data(), dst_device, src.raw_data(), src_device, bytes, src_device.index,
            stream.handle());
  record_stream(src, stream);
  record_stream(dst, stream);
  Event copied(src_device);
  copied.record(stream);
  copied.wait(dst_stream);
}

}  // namespace

TensorImpl* Tensor::checked() const {
  if (impl_ == nullptr) {
    throw std::logic_error(
        "operation on an undefined Tensor (default-constructed, or moved from with std::move)");
  }
  return impl_.get();
}

// ---- properties and element access ----

bool Tensor::is_contiguous() const {
  const Shape& s = shape();
  const std::vector<int64_t> expected = s.contiguous_strides();
  for (int64_t d = 0; d < s.rank(); ++d) {
    if (s[d] != 1 && strides()[d] != expected[d]) return false;  // size-1 dims: any stride
  }
  return true;
}

void* Tensor::raw_data() const {
  char* base = static_cast<char*>(storage()->data());
  return base == nullptr ? nullptr : base + offset() * static_cast<int64_t>(element_size(dtype()));
}

template <class T>
T* Tensor::data() const {
  if (dtype() != DTypeOf<T>::value) {
    throw std::invalid_argument(std::string("data<") + dtype_name(DTypeOf<T>::value) +
                                ">() called on a " + describe(*this) + " tensor");
  }
  return static_cast<T*>(raw_data());
}

// ---- views ----

Tensor Tensor::slice(int64_t start, int64_t end) const {
  if (dim() == 0) throw std::invalid_argument("slice: cannot slice a rank-0 tensor");
  const int64_t rows = size(0);
  if (start < 0 || start > end || end > rows) {
    throw std::out_of_range("slice: [start, end) = [" + std::to_string(start) + ", " +
                            std::to_string(end) + ") out of range for dim 0 of size " +
                            std::to_string(rows));
  }
  Shape s = shape();
  s.at(0) = end - start;
  return make_view(storage(), s, strides(), offset() + start * strides()[0], dtype());
}

std::vector<Tensor> Tensor::chunk(int64_t n) const {
  if (n <= 0) throw std::invalid_argument("chunk: n must be positive, got " + std::to_string(n));
  if (dim() == 0) throw std::invalid_argument("chunk: cannot chunk a rank-0 tensor");
  const int64_t rows = size(0);
  if (rows == 0) return {*this};  // torch.chunk of an empty dim: one empty chunk
  const int64_t per_chunk = (rows + n - 1) / n;
  std::vector<Tensor> chunks;
  for (int64_t start = 0; start < rows; start += per_chunk) {
    chunks.push_back(slice(start, std::min(rows, start + per_chunk)));
  }
  return chunks;
}

Tensor Tensor::reshape(const Shape& new_shape) const {
  std::vector<int64_t> dims = new_shape.dims();
  int64_t inferred = -1, known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1 && inferred < 0) {
      inferred = static_cast<int64_t>(i);
    } else if (dims[i] < 0) {
      throw std::invalid_argument("reshape: bad target shape " + new_shape.str() +
                                  " (at most one -1, other sizes >= 0)");
    } else {
      known *= dims[i];
    }
  }
  if (inferred >= 0 && known != 0) dims[static_cast<size_t>(inferred)] = numel() / known;
  const Shape target(std::move(dims));
  if (target.numel() != numel() || (inferred >= 0 && known == 0)) {
    throw std::invalid_argument("reshape: cannot reshape " + shape().str() + " (" +
                                std::to_string(numel()) + " elements) into " + new_shape.str());
  }
  if (!is_contiguous()) return contiguous().reshape(target);
  return make_view(storage(), target, target.contiguous_strides(), offset(), dtype());
}

Tensor Tensor::flatten_from(int64_t start_dim) const {
  const int64_t start = shape().wrap_dim(start_dim);
  std::vector<int64_t> dims(shape().dims().begin(), shape().dims().begin() + start);
  int64_t rest = 1;
  for (int64_t d = start; d < dim(); ++d) rest *= size(d);
  dims.push_back(rest);
  return reshape(Shape(std::move(dims)));
}

// ---- copies ----

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), {dtype(), device()});
  PW_KERNEL(device(), copy_strided)(*this, out);
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  const Tensor src = contiguous();
  Tensor out = empty(shape(), {dtype(), target});
  copy_across_devices(out, src);
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  const Tensor src = contiguous();
  Tensor out = empty(shape(), {target, device()});
  PW_KERNEL(device(), cast)(src, out);
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape() != shape() || src.dtype() != dtype()) {
    throw std::invalid_argument("copy_from: source " + describe(src) +
                                " does not match destination " + describe(*this));
  }
  if (!is_contiguous()) {
    throw std::invalid_argument("copy_from: destination " + describe(*this) +
                                " is not contiguous");
  }
  if (src.device() == device()) {
    PW_KERNEL(device(), copy_strided)(src, *this);
    return;
  }
  copy_across_devices(*this, src.contiguous());
}

double Tensor::item() const {
  if (numel() != 1) {
    throw std::invalid_argument("item: expected a one-element tensor, got shape " +
                                shape().str());
  }
  return to_vector<double>()[0];
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  const Tensor host = to(Device::cpu(0)).contiguous();
  std::vector<T> out(static_cast<size_t>(numel()));
  auto convert = [&](const auto* p) {
    using S = std::remove_cv_t<std::remove_pointer_t<decltype(p)>>;
    for (size_t i = 0; i < out.size(); ++i) {
      if constexpr (is_half_type<S> || is_half_type<T>) {
        out[i] = T(static_cast<float>(p[i]));  // a 16-bit side: through float32 (half.h)
      } else {
        out[i] = static_cast<T>(p[i]);
      }
    }
  };
  switch (dtype()) {
    case DType::kFloat32: convert(host.data<float>()); break;
    case DType::kFloat64: convert(host.data<double>()); break;
    case DType::kInt64: convert(host.data<int64_t>()); break;
    case DType::kBFloat16: convert(host.data<BFloat16>()); break;
    case DType::kFloat16: convert(host.data<Half>()); break;
  }
  return out;
}

// ---- autograd fields ----

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  if (requires_grad && !is_floating(dtype())) {
    throw std::invalid_argument("set_requires_grad: only floating tensors can require grad, got " +
                                describe(*this));
  }
  checked()->requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const { return Tensor(checked()->grad); }

void Tensor::set_grad(const Tensor& grad) { checked()->grad = grad.impl_ptr(); }

Tensor Tensor::detach() const {
  return make_view(storage(), shape(), strides(), offset(), dtype());
}

// ---- cat ----

Tensor cat(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) throw std::invalid_argument("cat: no tensors");
  const Tensor& first = tensors[0];
  if (first.dim() == 0) throw std::invalid_argument("cat: cannot concatenate rank-0 tensors");
  int64_t rows = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const bool same_trailing =
        t.dim() == first.dim() &&
        std::equal(t.shape().dims().begin() + 1, t.shape().dims().end(),
                   first.shape().dims().begin() + 1);
    if (!same_trailing || t.dtype() != first.dtype() || t.device() != first.device()) {
      throw std::invalid_argument("cat: tensor " + std::to_string(i) + " (" + describe(t) +
                                  ") does not match tensor 0 (" + describe(first) + ")");
    }
    rows += t.size(0);
  }
  Shape out_shape = first.shape();
  out_shape.at(0) = rows;
  Tensor out = Tensor::empty(out_shape, {first.dtype(), first.device()});
  int64_t row = 0;
  for (const Tensor& t : tensors) {
    out.slice(row, row + t.size(0)).copy_from(t);
    row += t.size(0);
  }
  return out;
}

// ---- explicit instantiations ----

#define PW_INSTANTIATE(T)                  \
  template T* Tensor::data<T>() const;   \
  template std::vector<T> Tensor::to_vector<T>() const;
PW_INSTANTIATE(float)
PW_INSTANTIATE(double)
PW_INSTANTIATE(int64_t)
PW_INSTANTIATE(BFloat16)
PW_INSTANTIATE(Half)
#undef PW_INSTANTIATE

}  // namespace pipewright
