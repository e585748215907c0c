// CUDA copies against the CPU: copy_strided on transposed, offset, broadcast (stride 0) and
// 5-D permuted views; cast between every pair of dtypes; Tensor::to round trips; both under
// small launch caps (kSmallLaunchLimits) too, where 1,000-1,517 elements wrap the grid-stride
// loops. Peer copies between cuda:0 and cuda:1 (Tensor::to and copy_from, both ways,
// contiguous, offset and strided sources, on the default streams and on created streams with
// work pending on both sides; under cudasim an unordered access is refused as a race).
// Copies and casts move or convert values exactly: bitwise comparisons throughout.
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <optional>

#include "cuda_kernels/launch_limits.h"
#include "tensor/ops.h"
#include "tensor/stream.h"
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

/// copy_strided of views of a random base of `base_numel` elements, every dtype, compared.
template <size_t N>
void check_copy_strided(const Layout (&layouts)[N], int64_t base_numel) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kBFloat16,
                      DType::kFloat16}) {
    const Tensor base_cpu = random_tensor({base_numel}, DType::kFloat64, 11, -100, 100).to(dtype);
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

TEST_CASE("cuda copy_strided matches cpu for non-contiguous views", "[cuda][copy]") {
  if (!gpu_available_or_skip()) return;
  const Layout layouts[] = {
      {"transpose of [5, 7]", {7, 5}, {1, 7}, 0},
      {"every other row, offset 3", {10, 6}, {12, 1}, 3},
      {"broadcast row (stride 0)", {9, 6}, {0, 1}, 0},
      {"5-D permutation", {2, 3, 2, 5, 2}, {1, 40, 2, 8, 4}, 0},
      {"contiguous (memcpy path)", {4, 30}, {30, 1}, 0},
  };
  check_copy_strided(layouts, 240);
}

TEST_CASE("cuda copy_strided matches cpu past the grid (small launch caps)",
          "[cuda][copy][limits]") {
  if (!gpu_available_or_skip()) return;
  const Layout layouts[] = {
      {"transpose of [41, 37]", {37, 41}, {1, 37}, 0},                    // 1,517 elements
      {"every other row, offset 5", {29, 37}, {74, 1}, 5},                 // 1,073
      {"broadcast row (stride 0)", {31, 43}, {0, 1}, 0},                   // 1,333
      {"5-D permutation", {2, 5, 4, 5, 5}, {1, 200, 2, 40, 8}, 0},        // 1,000
  };
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    check_copy_strided(layouts, 2200);
  }
}

/// cast of n random values between every pair of dtypes, compared.
void check_cast(int64_t n) {
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kBFloat16,
                         DType::kFloat16};
  for (DType from : dtypes) {
    const Tensor src = random_tensor({n}, DType::kFloat64, 12, -1000, 1000).to(from);
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

TEST_CASE("cuda cast matches cpu between every pair of dtypes", "[cuda][copy]") {
  if (!gpu_available_or_skip()) return;
  check_cast(1001);
}

TEST_CASE("cuda cast matches cpu past the grid (small launch caps)", "[cuda][copy][limits]") {
  if (!gpu_available_or_skip()) return;
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    check_cast(1237);
  }
}

TEST_CASE("cuda converts every 16-bit pattern, and float32 to 16 bits, as the cpu does",
          "[cuda][copy]") {
  // tensor/half.h runs in the kernels as on the CPU: the same bits, NaNs and ties included.
  if (!gpu_available_or_skip()) return;
  std::vector<uint16_t> bits(65536);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(i);
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    INFO(dtype_name(dtype));
    const Tensor patterns = Tensor::empty({65536}, {dtype, Device::cpu(0)});
    std::memcpy(patterns.raw_data(), bits.data(), patterns.nbytes());
    const Tensor widened_cpu = patterns.to(DType::kFloat32);
    const Tensor widened_gpu = patterns.to(gpu()).to(DType::kFloat32);
    check_bitwise_equal(widened_gpu, widened_cpu);
    // Back to 16 bits; and random float32 values across float16's range and past it.
    check_bitwise_equal(widened_gpu.to(dtype), widened_cpu.to(dtype));
    const Tensor between = random_tensor({4099}, DType::kFloat64, 13, -70000, 70000)
                               .to(DType::kFloat32);
    check_bitwise_equal(between.to(gpu()).to(dtype), between.to(dtype));
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

TEST_CASE("peer copies: Tensor::to between cuda:0 and cuda:1 both ways keeps the bytes",
          "[cuda][copy][peer]") {
  if (!gpus_available_or_skip(2)) return;
  const Device gpu0 = Device::cuda(0), gpu1 = Device::cuda(1);
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    INFO(dtype_name(dtype));
    const Tensor host = random_tensor({3, 417, 5}, DType::kFloat64, 14, -50, 50).to(dtype);
    const Tensor on0 = host.to(gpu0);
    const Tensor on1 = on0.to(gpu1);
    CHECK(on1.device() == gpu1);
    check_bitwise_equal(on1, host);
    const Tensor back = on1.to(gpu0);
    CHECK(back.device() == gpu0);
    check_bitwise_equal(back, host);
    // A slice at an offset, and a strided view (made contiguous on its GPU first), each way.
    check_bitwise_equal(on0.slice(1, 3).to(gpu1), host.slice(1, 3));
    check_bitwise_equal(on1.slice(2, 3).to(gpu0), host.slice(2, 3));
    const Layout t{"transpose of [15, 417]", {417, 15}, {1, 417}, 0};
    const Tensor host_t = view(host, t.shape, t.strides, 0);
    check_bitwise_equal(view(on0, t.shape, t.strides, 0).to(gpu1), host_t.contiguous());
    check_bitwise_equal(view(on1, t.shape, t.strides, 0).to(gpu0), host_t.contiguous());
    // copy_from into an existing tensor on the other GPU, both ways.
    Tensor dst1 = Tensor::zeros(host.shape(), {dtype, gpu1});
    dst1.copy_from(on0);
    check_bitwise_equal(dst1, host);
    Tensor dst0 = Tensor::zeros(host.shape(), {dtype, gpu0});
    dst0.copy_from(on1);
    check_bitwise_equal(dst0, host);
  }
}

// Work pending on both GPUs' current streams around each copy: the copy must wait for the
// kernels writing its source and for those still using its destination's memory, and the
// kernels after it on either side must wait for it. Values are compared with the same ops on
// the CPU (+ and * are exact on both).
TEST_CASE("peer copies with work pending on both GPUs, default and created streams",
          "[cuda][copy][peer]") {
  if (!gpus_available_or_skip(2)) return;
  const Device gpu0 = Device::cuda(0), gpu1 = Device::cuda(1);
  for (bool created : {false, true}) {
    INFO((created ? "created streams" : "default streams"));
    std::optional<StreamGuard> on0, on1;
    if (created) {
      on0.emplace(Stream::create(gpu0));
      on1.emplace(Stream::create(gpu1));
    }
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      INFO(dtype_name(dtype));
      const Tensor host = random_tensor({12345}, dtype, 15, -8, 8);
      Tensor x = host.to(gpu0);
      for (int i = 0; i < 3; ++i) x = ops::add(ops::mul(x, 0.5), 1.0);  // queued on cuda:0
      Tensor x_cpu = host;
      for (int i = 0; i < 3; ++i) x_cpu = ops::add(ops::mul(x_cpu, 0.5), 1.0);
      { Tensor busy = ops::mul(Tensor::ones({12345}, {dtype, gpu1}), 3.0); }  // freed busy
      const Tensor y = x.to(gpu1);                       // 0 -> 1
      Tensor z = ops::mul(ops::add(y, 2.0), 3.0);        // on cuda:1, after the copy
      ops::add_(x, Tensor::ones(x.shape(), {dtype, gpu0}));  // on cuda:0: after the copy's read
      { Tensor busy = ops::mul(Tensor::ones({12345}, {dtype, gpu0}), 3.0); }
      const Tensor w = z.to(gpu0);                       // 1 -> 0, z just computed on cuda:1
      ops::add_(z, Tensor::ones(z.shape(), {dtype, gpu1}));  // on cuda:1: after the read
      const Tensor v = ops::add(w, x);                   // on cuda:0, after both
      Tensor u = Tensor::empty(host.shape(), {dtype, gpu1});
      u.copy_from(v);                                    // 0 -> 1 again, into u's memory
      const Tensor r = ops::sub(u, z);                   // on cuda:1
      const Tensor z_cpu = ops::mul(ops::add(x_cpu, 2.0), 3.0);
      const Tensor x1_cpu = ops::add(x_cpu, 1.0);
      const Tensor v_cpu = ops::add(z_cpu, x1_cpu);
      const Tensor z1_cpu = ops::add(z_cpu, 1.0);
      check_bitwise_equal(w, z_cpu);
      check_bitwise_equal(x, x1_cpu);
      check_bitwise_equal(v, v_cpu);
      check_bitwise_equal(u, v_cpu);
      check_bitwise_equal(z, z1_cpu);
      check_bitwise_equal(r, ops::sub(v_cpu, z1_cpu));
    }
  }
}

}  // namespace
}  // namespace pipewright::testing
