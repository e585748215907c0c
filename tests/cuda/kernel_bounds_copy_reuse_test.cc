// No CUDA kernel writes past its output, and a cross-GPU copy keeps its blocks from reuse
// until it is done: the mistakes no other CUDA test caught when planted on purpose (the table
// "Bugs planted on purpose" in docs/cuda.md); each case fails with its mistake.
//
// Off-by-one in a grid-stride loop (`i <= n` in PW_GRID_STRIDE_LOOP, or one kernel's bound
// n + 1): the extra iteration writes element n, one past the output. The caching allocator
// rounds blocks up (512 B steps), so that write usually lands in the block's padding: the
// compared elements are right, nothing faults, and even ASan sees nothing unless the size is
// an exact multiple of 512 B. Here every output is the first n elements of a larger buffer
// whose tail holds a sentinel, so the stray write is seen directly, without a sanitizer.
//
// Dropped record_stream in a copy between GPUs (tensor/tensor.cc, Note [Copies between
// devices]): the copy runs on the source's current stream, but its source and destination
// blocks may belong to other streams, whose allocator hands them out again at once when they
// are freed. Only tests/tensor:device_copy_test (call order on a fake backend) noticed; here
// the block is freed right after the copy and reallocated and written on its own stream,
// which under cudasim is refused as a race with the copy unless the block was recorded on the
// copy's stream. (On a GPU the same mistake corrupts the copy only sometimes.)
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "tensor/stream.h"
#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

constexpr int64_t kN = 1000;     // not a multiple of the block (256) or of a 512 B class
constexpr int64_t kGuard = 8;    // sentinel elements after the output
constexpr double kSentinel = -12345.0;

/// A buffer of kN + kGuard elements on the GPU, the tail set to kSentinel; `out` is a view of
/// its first kN elements (contiguous, the buffer's start).
struct Guarded {
  explicit Guarded(DType dtype)
      : buffer(Tensor::full({kN + kGuard}, kSentinel, {dtype, gpu()})),
        out(buffer.slice(0, kN)) {}
  /// The guard band is untouched.
  void check_guard() const {
    const std::vector<double> tail = buffer.slice(kN, kN + kGuard).to_vector<double>();
    for (size_t i = 0; i < tail.size(); ++i) {
      INFO("guard element " << i << " (element " << kN + static_cast<int64_t>(i)
                            << " of the buffer)");
      CHECK(tail[i] == kSentinel);
    }
  }
  Tensor buffer, out;
};

TEST_CASE("cuda kernels write no element past their output", "[cuda][bounds]") {
  if (!gpu_available_or_skip()) return;
  const Kernels& k = gpu_kernels();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    INFO("dtype " << dtype_name(dtype));
    const Tensor a = random_tensor({kN}, dtype, 1, 0.5, 2.0).to(gpu());
    const Tensor b = random_tensor({kN}, dtype, 2, 0.5, 2.0).to(gpu());
    {
      INFO("fill");
      Guarded g(dtype);
      k.fill(g.out, 1.5);
      g.check_guard();
    }
    {
      INFO("binary");
      Guarded g(dtype);
      k.binary(BinaryOp::kAdd, a, b, g.out);
      g.check_guard();
    }
    {
      INFO("unary");
      Guarded g(dtype);
      k.unary(UnaryOp::kExp, a, g.out);
      g.check_guard();
    }
    {
      INFO("axpy (in place)");
      Guarded g(dtype);
      k.fill(g.out, 0.0);
      k.axpy(2.0, a, g.out);
      g.check_guard();
    }
    {
      INFO("cast");
      Guarded g(dtype);
      k.cast(a.to(dtype == DType::kFloat32 ? DType::kFloat64 : DType::kFloat32), g.out);
      g.check_guard();
    }
    {
      INFO("reduce (column sums: one thread per output)");
      Guarded g(dtype);
      k.reduce(ReduceOp::kSum, random_tensor({3, kN}, dtype, 3).to(gpu()), 1, 3, kN, g.out);
      g.check_guard();
    }
    {
      INFO("philox_uniform");
      Guarded g(dtype);
      k.philox_uniform(7, 0, 0.0, 1.0, g.out);
      g.check_guard();
    }
    {
      INFO("sgd_step (param and momentum in place)");
      Guarded param(dtype), momentum(dtype);
      k.fill(param.out, 1.0);
      k.fill(momentum.out, 0.0);
      k.sgd_step(param.out, a, momentum.out, 0.1, 0.9, 0.0, 0.0, false, true);
      param.check_guard();
      momentum.check_guard();
    }
  }
}

/// A float32 tensor of n elements on the current stream of `device`, all `value`. Each test
/// case uses its own n (its own size class), so a block one case leaves behind is never
/// handed to the next.
Tensor filled(Device device, int64_t n, double value) {
  return Tensor::full({n}, value, {DType::kFloat32, device});
}

TEST_CASE("cross-GPU to(): the source block is not reused by its stream before the copy read it",
          "[cuda][reuse]") {
  if (!gpus_available_or_skip(2)) return;
  constexpr int64_t n = 1 << 12;
  const Device gpu0 = Device::cuda(0), gpu1 = Device::cuda(1);
  const Stream owner = Stream::create(gpu0), copier = Stream::create(gpu0);
  const Stream on1 = Stream::create(gpu1);
  StreamGuard current1(on1);
  Tensor x;
  {
    StreamGuard on_owner(owner);
    x = filled(gpu0, n, 2.0);  // x's block belongs to `owner`
  }
  Tensor y;
  {
    StreamGuard on_copier(copier);
    Event written(gpu0);
    written.record(owner);
    written.wait(copier);  // the copy (on copier) reads x after it is written
    y = x.to(gpu1);
  }
  x = Tensor();  // freed: without record_stream, `owner` may hand the block out at once
  StreamGuard on_owner(owner);
  Tensor reused = filled(gpu0, n, 5.0);  // on `owner`: must not race with the copy's read
  check_close(y, Tensor::full({n}, 2.0), 0.0, 0.0);
  check_close(reused, Tensor::full({n}, 5.0), 0.0, 0.0);
}

TEST_CASE("cross-GPU copy_from: the destination block is not reused by its stream before the "
          "copy wrote it",
          "[cuda][reuse]") {
  if (!gpus_available_or_skip(2)) return;
  constexpr int64_t n = 1 << 13;
  const Device gpu0 = Device::cuda(0), gpu1 = Device::cuda(1);
  const Stream on0 = Stream::create(gpu0);
  const Stream owner = Stream::create(gpu1), current = Stream::create(gpu1);
  StreamGuard current0(on0);
  const Tensor x = filled(gpu0, n, 2.0);
  Tensor dst;
  {
    StreamGuard on_owner(owner);
    dst = Tensor::empty({n}, {DType::kFloat32, gpu1});  // belongs to `owner`
  }
  {
    StreamGuard on_current(current);
    dst.copy_from(x);  // on cuda:0's current stream; `current` (not `owner`) waits for it
  }
  // Not read here: a read on `current` would need the test's own record_stream(dst, current),
  // which (current having waited for the copy) would protect the block too and hide the bug.
  // copy_test checks copy_from's values.
  dst = Tensor();  // freed: without record_stream, `owner` may hand the block out at once
  StreamGuard on_owner(owner);
  Tensor reused = filled(gpu1, n, 5.0);  // on `owner`: must not race with the copy's write
  check_close(reused, Tensor::full({n}, 5.0), 0.0, 0.0);
}

}  // namespace
}  // namespace pipewright::testing
