// cuBLAS GEMM against the CPU (Eigen) for all four transpose cases, alpha/beta, float32 and
// float64, odd sizes, and the TF32 opt-in.
// Tolerances: both sides sum K products in different orders; with inputs in [-1, 1] the
// error of an entry is below K * eps * 1 in the worst case. float32: atol 1e-6 * K, rtol 1e-5;
// float64: atol 1e-15 * K. TF32 (10-bit mantissa inputs): atol 2e-3 * sqrt(K) * 4.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "cuda_kernels/blas.h"
#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

struct Dims {
  int64_t m, k, n;
};

const Dims kDims[] = {{1, 1, 1}, {17, 33, 9}, {128, 256, 64}, {257, 129, 513}, {3, 1000, 2}};

/// a as stored: [M, K] or [K, M] when transposed; b likewise.
Shape a_shape(const Dims& d, bool t) { return t ? Shape{d.k, d.m} : Shape{d.m, d.k}; }
Shape b_shape(const Dims& d, bool t) { return t ? Shape{d.n, d.k} : Shape{d.k, d.n}; }

TEST_CASE("cuda gemm matches cpu for every transpose case", "[cuda][gemm]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Dims& d : kDims) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{-0.5, 2.0}}) {
            INFO(dtype_name(dtype) << " M " << d.m << " K " << d.k << " N " << d.n << " ta " << ta
                                   << " tb " << tb << " alpha " << alpha << " beta " << beta);
            const Tensor a = random_tensor(a_shape(d, ta), dtype, 31);
            const Tensor b = random_tensor(b_shape(d, tb), dtype, 32);
            Tensor expected = random_tensor({d.m, d.n}, dtype, 33);
            Tensor actual = expected.to(gpu());
            cpu_kernels().gemm(ta, tb, alpha, a, b, beta, expected);
            gpu_kernels().gemm(ta, tb, alpha, a.to(gpu()), b.to(gpu()), beta, actual);
            const double k = static_cast<double>(d.k);
            check_close(actual, expected, tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-6, 1e-15) * k);
          }
        }
      }
    }
  }
}

TEST_CASE("cuda gemm with beta 0 ignores NaN in c", "[cuda][gemm]") {
  if (!gpu_available_or_skip()) return;
  const Tensor a = random_tensor({8, 4}, DType::kFloat32, 34);
  const Tensor b = random_tensor({4, 5}, DType::kFloat32, 35);
  Tensor expected = Tensor::full({8, 5}, std::numeric_limits<double>::quiet_NaN());
  Tensor actual = expected.to(gpu());
  cpu_kernels().gemm(false, false, 1.0, a, b, 0.0, expected);
  gpu_kernels().gemm(false, false, 1.0, a.to(gpu()), b.to(gpu()), 0.0, actual);
  for (double v : actual.to_vector<double>()) CHECK_FALSE(std::isnan(v));
  check_close(actual, expected, 1e-5, 1e-5);
}

TEST_CASE("cuda gemm with K = 0 scales c by beta", "[cuda][gemm]") {
  if (!gpu_available_or_skip()) return;
  const Tensor a = Tensor::empty({3, 0});
  const Tensor b = Tensor::empty({0, 2});
  Tensor expected = random_tensor({3, 2}, DType::kFloat64, 36);
  Tensor actual = expected.to(gpu());
  cpu_kernels().gemm(false, false, 1.0, a.to(DType::kFloat64), b.to(DType::kFloat64), 3.0,
                     expected);
  gpu_kernels().gemm(false, false, 1.0, a.to(DType::kFloat64).to(gpu()),
                     b.to(DType::kFloat64).to(gpu()), 3.0, actual);
  check_close(actual, expected, 1e-15, 0.0);
}

TEST_CASE("cuda gemm TF32 opt-in stays within TF32 accuracy and is off by default",
          "[cuda][gemm]") {
  if (!gpu_available_or_skip()) return;
  REQUIRE_FALSE(cuda::allow_tf32());
  const Dims d{256, 512, 256};
  const Tensor a = random_tensor({d.m, d.k}, DType::kFloat32, 37);
  const Tensor b = random_tensor({d.k, d.n}, DType::kFloat32, 38);
  Tensor expected = Tensor::empty({d.m, d.n});
  cpu_kernels().gemm(false, false, 1.0, a, b, 0.0, expected);
  Tensor actual = Tensor::empty({d.m, d.n}, {DType::kFloat32, gpu()});
  cuda::set_allow_tf32(true);
  gpu_kernels().gemm(false, false, 1.0, a.to(gpu()), b.to(gpu()), 0.0, actual);
  cuda::set_allow_tf32(false);
  check_close(actual, expected, 0.0, 2e-3 * std::sqrt(static_cast<double>(d.k)) * 4);
}

}  // namespace
}  // namespace pipewright::testing
