// CUDA index_select against the CPU: every dtype, repeated and empty indices, rows of one
// element and of many, and the out_of_range error.
#include <catch2/catch.hpp>

#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

TEST_CASE("cuda index_select matches cpu", "[cuda][index_select]") {
  if (!gpu_available_or_skip()) return;
  const Shape src_shapes[] = {{10}, {6000, 28, 28}, {7, 3}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    for (const Shape& shape : src_shapes) {
      for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{256}}) {
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

TEST_CASE("cuda index_select throws out_of_range like the cpu", "[cuda][index_select]") {
  if (!gpu_available_or_skip()) return;
  const Tensor src = Tensor::zeros({5, 2}, {DType::kFloat32, gpu()});
  const Tensor index = Tensor::from_vector<int64_t>({1, 4, 5, 9}, gpu());
  Tensor out = Tensor::empty({4, 2}, {DType::kFloat32, gpu()});
  CHECK_THROWS_WITH(gpu_kernels().index_select(src, index, out),
                    "index_select: index 5 at position 2 is outside [0, 5) for src of shape "
                    "[5, 2]");
}

}  // namespace
}  // namespace pipewright::testing
