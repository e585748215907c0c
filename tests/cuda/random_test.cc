// Philox fills and dropout on CUDA are bit-identical to the CPU (tensor/philox.h, Note
// [Bit-identical random numbers]): uniform, normal (odd lengths too) and dropout, float32 and
// float64, at offsets that are and are not multiples of 4, dropout with p = 0 and p = 1, and
// through Generator; and under small launch caps (kSmallLaunchLimits), where 1,237 and 5,003
// elements (310 and 1,251 Philox blocks, one thread each) wrap the grid-stride loops.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "cuda_kernels/launch_limits.h"
#include "tensor/generator.h"
#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

const int64_t kSizes[] = {1, 2, 3, 5, 1000, 1000001};
const uint64_t kOffsets[] = {0, 4, 1, 3, 4096 + 2};
const uint64_t kSeed = 0x123456789abcdefULL;

TEST_CASE("cuda philox_uniform is bit-identical to cpu", "[cuda][random]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t n : kSizes) {
      for (uint64_t offset : kOffsets) {
        INFO(dtype_name(dtype) << " n " << n << " offset " << offset);
        Tensor expected = Tensor::empty({n}, {dtype, Device::cpu(0)});
        Tensor actual = Tensor::empty({n}, {dtype, gpu()});
        cpu_kernels().philox_uniform(kSeed, offset, -2.0, 3.0, expected);
        gpu_kernels().philox_uniform(kSeed, offset, -2.0, 3.0, actual);
        check_bitwise_equal(actual, expected);
      }
    }
  }
}

TEST_CASE("cuda philox_normal is bit-identical to cpu", "[cuda][random]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t n : kSizes) {
      for (uint64_t offset : kOffsets) {
        INFO(dtype_name(dtype) << " n " << n << " offset " << offset);
        Tensor expected = Tensor::empty({n}, {dtype, Device::cpu(0)});
        Tensor actual = Tensor::empty({n}, {dtype, gpu()});
        cpu_kernels().philox_normal(kSeed, offset, 0.5, 2.0, expected);
        gpu_kernels().philox_normal(kSeed, offset, 0.5, 2.0, actual);
        check_bitwise_equal(actual, expected);
      }
    }
  }
}

TEST_CASE("cuda dropout mask and output are bit-identical to cpu", "[cuda][random]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (double p : {0.0, 0.1, 0.5, 0.9, 1.0}) {  // p = 1: mask and output all zero
      for (uint64_t offset : kOffsets) {
        INFO(dtype_name(dtype) << " p " << p << " offset " << offset);
        const Tensor x = random_tensor({123, 457}, dtype, 61);
        Tensor out = Tensor::empty(x.shape(), {dtype, Device::cpu(0)});
        Tensor mask = Tensor::empty(x.shape(), {dtype, Device::cpu(0)});
        Tensor out_g = Tensor::empty(x.shape(), {dtype, gpu()});
        Tensor mask_g = Tensor::empty(x.shape(), {dtype, gpu()});
        cpu_kernels().dropout(kSeed, offset, p, x, out, mask);
        gpu_kernels().dropout(kSeed, offset, p, x.to(gpu()), out_g, mask_g);
        check_bitwise_equal(mask_g, mask);
        check_bitwise_equal(out_g, out);
        if (p == 1.0) {  // everything dropped: not only equal to the CPU, but zero
          const std::vector<double> m = mask_g.to_vector<double>();
          CHECK(std::count(m.begin(), m.end(), 0.0) == static_cast<std::ptrdiff_t>(m.size()));
        }
      }
    }
  }
}

TEST_CASE("dropout_indirect (the seed read from memory when the kernel runs) equals dropout, "
          "on the cpu and on cuda",
          "[cuda][random][graph]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (uint64_t offset : kOffsets) {
      INFO(dtype_name(dtype) << " offset " << offset);
      const Tensor x = random_tensor({37, 91}, dtype, 62);
      const Tensor seed = Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(kSeed)});
      const Tensor seed_g = seed.to(gpu());
      Tensor out = Tensor::empty(x.shape(), {dtype, Device::cpu(0)});
      Tensor mask = Tensor::empty(x.shape(), {dtype, Device::cpu(0)});
      Tensor out2 = Tensor::empty(x.shape(), {dtype, Device::cpu(0)});
      Tensor mask2 = Tensor::empty(x.shape(), {dtype, Device::cpu(0)});
      Tensor out_g = Tensor::empty(x.shape(), {dtype, gpu()});
      Tensor mask_g = Tensor::empty(x.shape(), {dtype, gpu()});
      cpu_kernels().dropout(kSeed, offset, 0.3, x, out, mask);
      cpu_kernels().dropout_indirect(seed.raw_data(), offset, 0.3, x, out2, mask2);
      gpu_kernels().dropout_indirect(seed_g.raw_data(), offset, 0.3, x.to(gpu()), out_g, mask_g);
      check_bitwise_equal(out2, out);
      check_bitwise_equal(mask2, mask);
      check_bitwise_equal(out_g, out);
      check_bitwise_equal(mask_g, mask);
    }
  }
}

TEST_CASE("cuda philox fills and dropout are bit-identical to cpu past the grid (small caps)",
          "[cuda][random][limits]") {
  if (!gpu_available_or_skip()) return;
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      for (int64_t n : {int64_t{1237}, int64_t{5003}}) {
        for (uint64_t offset : {uint64_t{0}, uint64_t{3}, uint64_t{4098}}) {
          INFO(describe(limits) << ", " << dtype_name(dtype) << " n " << n << " offset "
                                << offset);
          Tensor expected = Tensor::empty({n}, {dtype, Device::cpu(0)});
          Tensor actual = Tensor::empty({n}, {dtype, gpu()});
          cpu_kernels().philox_uniform(kSeed, offset, -2.0, 3.0, expected);
          gpu_kernels().philox_uniform(kSeed, offset, -2.0, 3.0, actual);
          check_bitwise_equal(actual, expected);
          cpu_kernels().philox_normal(kSeed, offset, 0.5, 2.0, expected);
          gpu_kernels().philox_normal(kSeed, offset, 0.5, 2.0, actual);
          check_bitwise_equal(actual, expected);
          const Tensor x = random_tensor({n}, dtype, 62);
          for (double p : {0.0, 0.3, 1.0}) {
            INFO("dropout p " << p);
            Tensor out = Tensor::empty({n}, {dtype, Device::cpu(0)});
            Tensor mask = Tensor::empty({n}, {dtype, Device::cpu(0)});
            Tensor out_g = Tensor::empty({n}, {dtype, gpu()});
            Tensor mask_g = Tensor::empty({n}, {dtype, gpu()});
            cpu_kernels().dropout(kSeed, offset, p, x, out, mask);
            gpu_kernels().dropout(kSeed, offset, p, x.to(gpu()), out_g, mask_g);
            check_bitwise_equal(mask_g, mask);
            check_bitwise_equal(out_g, out);
          }
        }
      }
    }
  }
}

TEST_CASE("a Generator gives the same stream on cpu and cuda", "[cuda][random]") {
  if (!gpu_available_or_skip()) return;
  Generator on_cpu(42), on_gpu(42);
  Tensor a = Tensor::empty({1001});
  Tensor b = Tensor::empty({1001}, {DType::kFloat32, gpu()});
  on_cpu.normal_(a);
  on_gpu.normal_(b);
  check_bitwise_equal(b, a);
  on_cpu.uniform_(a, -1.0, 1.0);  // the offsets advanced identically
  on_gpu.uniform_(b, -1.0, 1.0);
  check_bitwise_equal(b, a);
  CHECK(on_cpu.offset() == on_gpu.offset());
}

TEST_CASE("Tensor's factories on a GPU: the CPU's numbers, and from_blob over device memory",
          "[cuda][random]") {
  if (!gpu_available_or_skip()) return;
  Generator on_cpu(7), on_gpu(7);
  check_bitwise_equal(Tensor::rand({1001}, on_gpu, {.device = gpu()}),
                      Tensor::rand({1001}, on_cpu));
  check_bitwise_equal(Tensor::randn({3, 5}, on_gpu, {.dtype = DType::kFloat64, .device = gpu()}),
                      Tensor::randn({3, 5}, on_cpu, {.dtype = DType::kFloat64}));
  check_bitwise_equal(Tensor::arange(0, 2, 0.5, {.device = gpu()}), Tensor::arange(0, 2, 0.5));
  check_bitwise_equal(Tensor::full({4}, 1.5, {.device = gpu()}), Tensor::full({4}, 1.5));

  const Tensor owner = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, gpu());
  Tensor view = Tensor::from_blob(owner.raw_data(), {2, 3}, {.device = gpu()});
  CHECK(view.device() == gpu());
  CHECK(view.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  view.slice(1, 2).copy_from(Tensor::full({1, 3}, 9));  // host -> the blob's device memory
  CHECK(owner.to_vector<float>() == std::vector<float>{1, 2, 3, 9, 9, 9});
}

}  // namespace
}  // namespace pipewright::testing
