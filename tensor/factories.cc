// Tensor's factories (tensor.h): empty, zeros, ones, full, scalar, arange, rand, randn,
// from_vector and from_blob.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tensor/generator.h"
#include "tensor/kernels.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace pipewright {
namespace {

void check_sizes(const char* factory, const Shape& shape) {
  for (int64_t size : shape.dims()) {
    if (size < 0) {
      throw std::invalid_argument(std::string("Tensor::") + factory + ": negative size in shape " +
                                  shape.str());
    }
  }
}

/// A contiguous tensor of `shape` over all of `storage`.
Tensor contiguous_over(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = shape.contiguous_strides();
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

/// rand and randn make floating tensors only.
void check_floating(const char* factory, DType dtype) {
  if (!is_floating(dtype)) {
    throw std::invalid_argument(std::string("Tensor::") + factory + ": dtype " +
                                dtype_name(dtype) + " is not floating (float32 or float64)");
  }
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, TensorOptions options) {
  check_sizes("empty", shape);
  const size_t bytes = static_cast<size_t>(shape.numel()) * element_size(options.dtype);
  auto storage = std::make_shared<Storage>(bytes, options.device,
                                           Stream::current(options.device).handle());
  return contiguous_over(std::move(storage), shape, options.dtype);
}

Tensor Tensor::full(const Shape& shape, double value, TensorOptions options) {
  Tensor t = empty(shape, options);
  PW_KERNEL(options.device, fill)(t, value);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, TensorOptions options) {
  return full(shape, 0.0, options);
}

Tensor Tensor::ones(const Shape& shape, TensorOptions options) {
  return full(shape, 1.0, options);
}

Tensor Tensor::scalar(double value, TensorOptions options) {
  return full(Shape{}, value, options);
}

Tensor Tensor::arange(int64_t n, TensorOptions options) {
  if (n < 0) throw std::invalid_argument("arange: n must be >= 0, got " + std::to_string(n));
  return arange(0.0, static_cast<double>(n), 1.0, options);
}

Tensor Tensor::arange(double start, double end, double step, TensorOptions options) {
  const std::string args = "(start " + std::to_string(start) + ", end " + std::to_string(end) +
                           ", step " + std::to_string(step) + ")";
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step) || step == 0) {
    throw std::invalid_argument("arange: start, end and step must be finite, step nonzero " +
                                args);
  }
  if ((end - start) * step < 0) {
    throw std::invalid_argument("arange: step goes away from end " + args);
  }
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    values[static_cast<size_t>(i)] = start + static_cast<double>(i) * step;
  }
  return from_vector(values, Shape{n}, options.device).to(options.dtype);
}

Tensor Tensor::rand(const Shape& shape, Generator& generator, TensorOptions options) {
  check_floating("rand", options.dtype);
  Tensor t = empty(shape, options);
  generator.uniform_(t, 0.0, 1.0);
  return t;
}

Tensor Tensor::rand(const Shape& shape, TensorOptions options) {
  return rand(shape, current_generator(), options);
}

Tensor Tensor::randn(const Shape& shape, Generator& generator, TensorOptions options) {
  check_floating("randn", options.dtype);
  Tensor t = empty(shape, options);
  generator.normal_(t, 0.0, 1.0);
  return t;
}

Tensor Tensor::randn(const Shape& shape, TensorOptions options) {
  return randn(shape, current_generator(), options);
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  check_sizes("from_vector", shape);
  if (static_cast<int64_t>(values.size()) != shape.numel()) {
    throw std::invalid_argument("from_vector: " + std::to_string(values.size()) +
                                " values for shape " + shape.str() + " (" +
                                std::to_string(shape.numel()) + " elements)");
  }
  Tensor t = empty(shape, {DTypeOf<T>::value, device});
  if (t.nbytes() > 0) {
    copy_on_stream(t.raw_data(), device, values.data(), Device::cpu(0), t.nbytes(),
                   Stream::current(device));
  }
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, TensorOptions options) {
  check_sizes("from_blob", shape);
  const size_t size = element_size(options.dtype);
  const size_t bytes = static_cast<size_t>(shape.numel()) * size;
  if (data == nullptr && bytes > 0) {
    throw std::invalid_argument("from_blob: null data for shape " + shape.str());
  }
  if (reinterpret_cast<uintptr_t>(data) % size != 0) {
    throw std::invalid_argument(std::string("from_blob: data is not aligned to the ") +
                                std::to_string(size) + "-byte elements of " +
                                dtype_name(options.dtype));
  }
  return contiguous_over(std::make_shared<Storage>(data, bytes, options.device), shape,
                         options.dtype);
}

template Tensor Tensor::from_vector<float>(const std::vector<float>&, const Shape&, Device);
template Tensor Tensor::from_vector<double>(const std::vector<double>&, const Shape&, Device);
template Tensor Tensor::from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, Device);
template Tensor Tensor::from_vector<BFloat16>(const std::vector<BFloat16>&, const Shape&, Device);
template Tensor Tensor::from_vector<Half>(const std::vector<Half>&, const Shape&, Device);

}  // namespace pipewright
