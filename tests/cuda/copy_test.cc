// CUDA copies against the CPU: copy_strided on transposed, offset, broadcast (stride 0) and
// 5-D permuted views; cast between every pair of dtypes; Tensor::to round trips.
// Copies and casts move or convert values exactly: bitwise comparisons throughout.
#include <catch2/catch.hpp>

#include <memory>

#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

/// A view of `base`'s storage with the given shape, strides and offset (elements).
Tensor view(const Tensor& base, Shape shape, std::vector<int64_t> strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = base.offset() + offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

struct Layout {
  const char* name;
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset;
};

TEST_CASE("cuda copy_strided matches cpu for non-contiguous views", "[cuda][copy]") {
  if (!gpu_available_or_skip()) return;
  const Layout layouts[] = {
      {"transpose of [5, 7]", {7, 5}, {1, 7}, 0},
      {"every other row, offset 3", {10, 6}, {12, 1}, 3},
      {"broadcast row (stride 0)", {9, 6}, {0, 1}, 0},
      {"5-D permutation", {2, 3, 2, 5, 2}, {1, 40, 2, 8, 4}, 0},
      {"contiguous (memcpy path)", {4, 30}, {30, 1}, 0},
  };
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    const Tensor base_cpu = random_tensor({240}, DType::kFloat64, 11, -100, 100).to(dtype);
    const Tensor base_gpu = base_cpu.to(gpu());
    for (const Layout& l : layouts) {
      INFO(l.name << ", dtype " << dtype_name(dtype));
      const Tensor src_cpu = view(base_cpu, l.shape, l.strides, l.offset);
      const Tensor src_gpu = view(base_gpu, l.shape, l.strides, l.offset);
      Tensor expected = Tensor::empty(l.shape, {dtype, Device::cpu(0)});
      Tensor actual = Tensor::empty(l.shape, {dtype, gpu()});
      cpu_kernels().copy_strided(src_cpu, expected);
      gpu_kernels().copy_strided(src_gpu, actual);
      check_bitwise_equal(actual, expected);
    }
  }
}

TEST_CASE("cuda cast matches cpu between every pair of dtypes", "[cuda][copy]") {
  if (!gpu_available_or_skip()) return;
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt64};
  for (DType from : dtypes) {
    const Tensor src = random_tensor({1001}, DType::kFloat64, 12, -1000, 1000).to(from);
    for (DType to : dtypes) {
      if (from == to) continue;
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      Tensor expected = Tensor::empty(src.shape(), {to, Device::cpu(0)});
      Tensor actual = Tensor::empty(src.shape(), {to, gpu()});
      cpu_kernels().cast(src, expected);
      gpu_kernels().cast(src.to(gpu()), actual);
      check_bitwise_equal(actual, expected);
    }
  }
}

TEST_CASE("Tensor::to(cuda) and back returns the same bytes", "[cuda][copy]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    const Tensor host = random_tensor({3, 1000, 7}, DType::kFloat64, 13, -50, 50).to(dtype);
    const Tensor device = host.to(gpu());
    CHECK(device.device() == gpu());
    CHECK(device.shape() == host.shape());
    const Tensor twice = device.to(gpu());  // already there: the same tensor
    CHECK(twice.is_same(device));
    const Tensor back = device.to(Device::cpu(0));
    CHECK(back.device() == Device::cpu(0));
    check_bitwise_equal(back, host);
    // A device-to-device clone and a non-contiguous slice survive the trip too.
    check_bitwise_equal(device.clone(), host);
    check_bitwise_equal(device.slice(1, 3).to(Device::cpu(1)), host.slice(1, 3));
  }
}

TEST_CASE("empty tensors copy to and from the GPU", "[cuda][copy]") {
  if (!gpu_available_or_skip()) return;
  const Tensor host = Tensor::empty({0, 4});
  const Tensor device = host.to(gpu());
  CHECK(device.numel() == 0);
  CHECK(device.to(Device::cpu(0)).shape() == host.shape());
}

}  // namespace
}  // namespace pipewright::testing
