// CUDA index_select against the CPU: every dtype, repeated and empty indices, rows of one
// element and of many, empty rows (src [rows, 0, ...]: nothing copied, indices still checked),
// and the out_of_range error; and under small launch caps (kSmallLaunchLimits), where 1,000-
// 2,107 output elements wrap the grid-stride loop, with the first bad index found wherever it
// falls.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cuda_kernels/launch_limits.h"
#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

/// index_select of k random rows of src shape on both devices, every dtype, compared bitwise.
void check_index_select(const std::vector<Shape>& src_shapes, const std::vector<int64_t>& ks) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    for (const Shape& shape : src_shapes) {
      for (int64_t k : ks) {
        INFO(dtype_name(dtype) << " src " << shape.str() << " k " << k);
        const Tensor src = random_tensor(shape, DType::kFloat64, 91, -9, 9).to(dtype);
        const Tensor index = random_indices({k}, shape[0], 92);  // repeats likely
        Shape out_shape = shape;
        out_shape.at(0) = k;
        Tensor expected = Tensor::empty(out_shape, {dtype, Device::cpu(0)});
        Tensor actual = Tensor::empty(out_shape, {dtype, gpu()});
        cpu_kernels().index_select(src, index, expected);
        gpu_kernels().index_select(src.to(gpu()), index.to(gpu()), actual);
        check_bitwise_equal(actual, expected);
      }
    }
  }
}

TEST_CASE("cuda index_select matches cpu", "[cuda][index_select]") {
  if (!gpu_available_or_skip()) return;
  check_index_select({{10}, {6000, 28, 28}, {7, 3}, {5, 0}, {4, 0, 3}}, {0, 1, 256});
}

TEST_CASE("cuda index_select matches cpu past the grid (small launch caps)",
          "[cuda][index_select][limits]") {
  if (!gpu_available_or_skip()) return;
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    // 301 x 7 = 2,107 elements; 1,000 indices into empty rows (one thread per index).
    check_index_select({{50, 7}, {5, 0}}, {301, 1000});
  }
}

// The lowest bad position wins wherever the grid-stride loop reaches it: positions 900 and
// 650 come in later strides than 777 at max_grid 1-3; with empty rows too (the indices are
// still checked), and the same message as the CPU.
TEST_CASE("cuda index_select names the first bad index past the grid, empty rows too",
          "[cuda][index_select][limits]") {
  if (!gpu_available_or_skip()) return;
  std::vector<int64_t> idx = random_indices({1000}, 5, 93).to_vector<int64_t>();
  idx[900] = -1;
  idx[777] = 5;
  idx[650] = 11;
  const Tensor index = Tensor::from_vector(idx, Device::cpu(0));
  for (const Shape& shape : {Shape{5, 3}, Shape{5, 0}}) {
    const Tensor src = Tensor::zeros(shape, {DType::kFloat32, Device::cpu(0)});
    Shape out_shape = shape;
    out_shape.at(0) = 1000;
    const std::string message =
        "index_select: index 11 at position 650 is outside [0, 5) for src of shape " +
        shape.str();
    Tensor out_cpu = Tensor::empty(out_shape, {DType::kFloat32, Device::cpu(0)});
    CHECK_THROWS_WITH(cpu_kernels().index_select(src, index, out_cpu), message);
    for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
      cuda::ScopedLaunchLimits scoped(limits);
      INFO(describe(limits) << ", src " << shape.str());
      Tensor out = Tensor::empty(out_shape, {DType::kFloat32, gpu()});
      CHECK_THROWS_WITH(
          run_and_read([&] { gpu_kernels().index_select(src.to(gpu()), index.to(gpu()), out); }),
          message);
    }
  }
}

TEST_CASE("cuda index_select throws out_of_range like the cpu", "[cuda][index_select]") {
  if (!gpu_available_or_skip()) return;
  const Tensor src = Tensor::zeros({5, 2}, {DType::kFloat32, gpu()});
  const Tensor index = Tensor::from_vector<int64_t>({1, 4, 5, 9}, gpu());
  Tensor out = Tensor::empty({4, 2}, {DType::kFloat32, gpu()});
  // Queued without a wait (Note [Deferred checks]); the thread's next read raises it, once.
  CHECK_NOTHROW(gpu_kernels().index_select(src, index, out));
  CHECK_THROWS_WITH(out.to(Device::cpu(0)),
                    "index_select: index 5 at position 2 is outside [0, 5) for src of shape "
                    "[5, 2]");
  CHECK_NOTHROW(out.to(Device::cpu(0)));
}

}  // namespace
}  // namespace pipewright::testing
