// Mixed-precision GEMM on CUDA (cublasGemmEx, cublasGemmStridedBatchedEx): ops::matmul,
// ops::gemm_ and ops::batched_matmul with bfloat16 or float16 operands and a float32 result
// against the CPU path on the same 16-bit inputs.
// Exact inputs (multiples of 1/8 up to 8 in magnitude): exact in both 16-bit formats, and every
// product and partial sum is exact in float32 (at most 17 significant bits for K <= 1000), so
// both devices agree bit for bit whatever their summation order.
// Random inputs in [-1, 1) rounded to 16 bits: each product of two 16-bit values is exact in
// float32 on both sides, only the order of the float32 sums differs, so the float32 GEMM's
// tolerance applies (gemm_test.cc): rtol 1e-5, atol 1e-6 * K.
#include <catch2/catch.hpp>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/batched_matmul.h"
#include "tensor/ops.h"
#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

constexpr DType k16Bit[] = {DType::kBFloat16, DType::kFloat16};

/// A float32 CPU tensor of multiples of 1/8 in [-8, 8].
Tensor eighths(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-64, 64);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = static_cast<float>(dist(rng)) / 8;
  return Tensor::from_vector(v, shape);
}

/// a as stored for op(a) [m, k]: [k, m] when transposed.
Shape stored(int64_t rows, int64_t cols, bool transposed) {
  return transposed ? Shape{cols, rows} : Shape{rows, cols};
}

TEST_CASE("cuda matmul of 16-bit operands equals the cpu's bit for bit", "[cuda][gemm]") {
  if (!gpu_available_or_skip()) return;
  const int64_t m = 17, k = 33, n = 9;
  for (DType dtype : k16Bit) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        INFO(dtype_name(dtype) << " ta " << ta << " tb " << tb);
        const Tensor a = eighths(stored(m, k, ta), 61).to(dtype);
        const Tensor b = eighths(stored(k, n, tb), 62).to(dtype);
        const Tensor expected = ops::matmul(a, b, ta, tb);
        const Tensor actual = ops::matmul(a.to(gpu()), b.to(gpu()), ta, tb);
        CHECK(actual.dtype() == DType::kFloat32);
        CHECK(actual.device() == gpu());
        check_bitwise_equal(actual, expected);
      }
    }
  }
}

TEST_CASE("cuda gemm_ of 16-bit operands accumulates into float32 c as the cpu does",
          "[cuda][gemm]") {
  if (!gpu_available_or_skip()) return;
  const int64_t m = 7, k = 12, n = 5;
  for (DType dtype : k16Bit) {
    for (bool ta : {false, true}) {
      INFO(dtype_name(dtype) << " ta " << ta);
      const Tensor a = eighths(stored(m, k, ta), 63).to(dtype);
      const Tensor b = eighths({k, n}, 64).to(dtype);
      Tensor expected = eighths({m, n}, 65);
      Tensor actual = expected.to(gpu());
      ops::gemm_(expected, a, b, ta, false, 0.5, 1.0);
      ops::gemm_(actual, a.to(gpu()), b.to(gpu()), ta, false, 0.5, 1.0);
      check_bitwise_equal(actual, expected);
    }
  }
}

TEST_CASE("cuda batched_matmul of 16-bit operands equals the cpu's bit for bit",
          "[cuda][gemm]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : k16Bit) {
    for (bool tb : {false, true}) {
      INFO(dtype_name(dtype) << " tb " << tb);
      // A stack of 6 products, then one b shared by every matrix of a (a stride-0 operand).
      const Tensor a = eighths({2, 3, 5, 8}, 66).to(dtype);
      const Tensor b = eighths({2, 3, tb ? 4 : 8, tb ? 8 : 4}, 67).to(dtype);
      const Tensor shared = eighths(stored(8, 4, tb), 68).to(dtype);
      check_bitwise_equal(ops::batched_matmul(a.to(gpu()), b.to(gpu()), false, tb),
                          ops::batched_matmul(a, b, false, tb));
      check_bitwise_equal(ops::batched_matmul(a.to(gpu()), shared.to(gpu()), false, tb),
                          ops::batched_matmul(a, shared, false, tb));
    }
  }
}

TEST_CASE("cuda matmul and batched_matmul of random 16-bit operands match the cpu within the "
          "float32 GEMM tolerance",
          "[cuda][gemm]") {
  if (!gpu_available_or_skip()) return;
  const int64_t m = 65, k = 300, n = 33;
  for (DType dtype : k16Bit) {
    INFO(dtype_name(dtype));
    const Tensor a = random_tensor({m, k}, DType::kFloat32, 69).to(dtype);
    const Tensor b = random_tensor({n, k}, DType::kFloat32, 70).to(dtype);
    const double atol = 1e-6 * static_cast<double>(k);
    check_close(ops::matmul(a.to(gpu()), b.to(gpu()), false, true), ops::matmul(a, b, false, true),
                1e-5, atol);
    const Tensor stack = random_tensor({3, k, m}, DType::kFloat32, 71).to(dtype);
    check_close(ops::batched_matmul(stack.to(gpu()), b.to(gpu()), true, true),
                ops::batched_matmul(stack, b, true, true), 1e-5, atol);
  }
}

TEST_CASE("cuda gemm kernels refuse mixed 16-bit dtypes, naming them", "[cuda][gemm]") {
  if (!gpu_available_or_skip()) return;
  const Tensor a = Tensor::zeros({2, 3}, {DType::kBFloat16, gpu()});
  const Tensor b = Tensor::zeros({3, 4}, {DType::kFloat16, gpu()});
  Tensor c = Tensor::zeros({2, 4}, {DType::kFloat32, gpu()});
  CHECK_THROWS_WITH(gpu_kernels().gemm(false, false, 1.0, a, b, 0.0, c),
                    Catch::Contains("a bfloat16, b float16, c float32"));
  const Tensor b16 = Tensor::zeros({3, 4}, {DType::kBFloat16, gpu()});
  Tensor c16 = Tensor::zeros({2, 4}, {DType::kBFloat16, gpu()});
  CHECK_THROWS_AS(gpu_kernels().gemm(false, false, 1.0, a, b16, 0.0, c16),
                  std::invalid_argument);  // a 16-bit c: float32 only
  Tensor c3 = Tensor::zeros({1, 2, 4}, {DType::kFloat32, gpu()});
  CHECK_THROWS_WITH(gpu_kernels().gemm_batched(false, false, 1.0, a.reshape({1, 2, 3}),
                                               b.reshape({1, 3, 4}), 0.0, c3),
                    Catch::Contains("cuda gemm_batched: unsupported dtypes a bfloat16, b float16"));
}

}  // namespace
}  // namespace pipewright::testing
