// cuBLAS GEMM against the CPU (Eigen) for all four transpose cases, alpha/beta, float32 and
// float64, odd sizes, and the TF32 opt-in.
// Tolerances: both sides sum K products in different orders; with inputs in [-1, 1] the
// error of an entry is below K * eps * 1 in the worst case. float32: atol 1e-6 * K, rtol 1e-5;
// float64: atol 1e-15 * K. TF32 (10-bit mantissa inputs): a real difference from FP32 required,
// and at most 2e-3 Frobenius-relative / 1e-2 of the entries' RMS per entry (see the test).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cuda_kernels/blas.h"
#include "tensor/batched_matmul.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops.h"
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
  Tensor fp32 = Tensor::empty({d.m, d.n}, {DType::kFloat32, gpu()});
  gpu_kernels().gemm(false, false, 1.0, a.to(gpu()), b.to(gpu()), 0.0, fp32);
  Tensor tf32 = Tensor::empty({d.m, d.n}, {DType::kFloat32, gpu()});
  cuda::set_allow_tf32(true);
  gpu_kernels().gemm(false, false, 1.0, a.to(gpu()), b.to(gpu()), 0.0, tf32);
  cuda::set_allow_tf32(false);
  // TF32 must really be in use: its error (inputs rounded to 10 mantissa bits, ~2.6e-4
  // relative here) far above FP32's (~1e-7 on a GPU; 0 under cudasim, which sums like Eigen).
  // And no worse than TF32 should be: Frobenius-relative error under 2e-3 (rounding gives
  // ~2.6e-4, truncating conversions twice that), each entry within 1e-2 of the entries' RMS
  // (max seen 8e-3 of an RMS of 7.6, i.e. 1.1e-3).
  const std::vector<double> e = expected.to_vector<double>(), f = fp32.to_vector<double>(),
                            t = tf32.to_vector<double>();
  double norm = 0, fp32_err = 0, tf32_err = 0, max_tf32 = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    norm += e[i] * e[i];
    fp32_err += (f[i] - e[i]) * (f[i] - e[i]);
    tf32_err += (t[i] - e[i]) * (t[i] - e[i]);
    max_tf32 = std::max(max_tf32, std::abs(t[i] - e[i]));
  }
  const double rms = std::sqrt(norm / static_cast<double>(e.size()));
  fp32_err = std::sqrt(fp32_err / norm);
  tf32_err = std::sqrt(tf32_err / norm);
  INFO("relative (Frobenius) error vs the CPU: FP32 " << fp32_err << ", TF32 " << tf32_err
                                                      << "; TF32 max |diff| " << max_tf32
                                                      << ", RMS of the entries " << rms);
  CHECK(fp32_err < 1e-6);
  CHECK(tf32_err > 3e-5);
  CHECK(tf32_err > 30 * fp32_err);
  CHECK(tf32_err < 2e-3);
  CHECK(max_tf32 < 1e-2 * rms);

  // torch.set_float32_matmul_precision("high") is the same switch (tensor/matmul_precision.h),
  // for plain and batched products; "highest" turns it off again.
  set_float32_matmul_precision(Float32MatmulPrecision::kHigh);
  CHECK(cuda::allow_tf32());
  Tensor high = Tensor::empty({d.m, d.n}, {DType::kFloat32, gpu()});
  gpu_kernels().gemm(false, false, 1.0, a.to(gpu()), b.to(gpu()), 0.0, high);
  const Tensor batched = ops::batched_matmul(a.reshape({1, d.m, d.k}).to(gpu()),
                                             b.reshape({1, d.k, d.n}).to(gpu()));
  set_float32_matmul_precision(Float32MatmulPrecision::kHighest);
  CHECK_FALSE(cuda::allow_tf32());
  check_bitwise_equal(high, tf32);
  check_bitwise_equal(batched.reshape({d.m, d.n}), tf32);
}

}  // namespace
}  // namespace pipewright::testing

namespace pipewright::testing {
namespace {

/// gemm_bias's result for (a, b, bias) on `device`'s kernels.
Tensor bias_product(bool ta, bool tb, const Tensor& a, const Tensor& b, const Tensor& bias,
                    const Shape& shape, Device device) {
  Tensor c = Tensor::empty(shape, {bias.dtype(), device});
  const Kernels& k = device.is_cpu() ? cpu_kernels() : gpu_kernels();
  k.gemm_bias(ta, tb, a.to(device), b.to(device), bias.to(device), c);
  return c;
}

/// cuda::set_bias_epilogue for a scope.
struct BiasEpilogue {
  explicit BiasEpilogue(bool enabled) { cuda::set_bias_epilogue(enabled); }
  ~BiasEpilogue() { cuda::set_bias_epilogue(true); }
};

// Note [The bias in the epilogue] (cuda_kernels/gemm.cc): the GPU adds the bias in cuBLASLt's
// epilogue, the CPU copies it into c and runs the GEMM with beta 1. Every dtype (16-bit
// operands with a float32 result and bias), every transpose case, K = 0 (c is the bias):
// against the CPU, and against the GPU's broadcast path (set_bias_epilogue(false)), which
// adds the same bias to the same product.
TEST_CASE("cuda gemm_bias matches the cpu and the broadcast path, every dtype and transpose",
          "[cuda][gemm]") {
  if (!gpu_available_or_skip()) return;
  std::vector<Dims> dims(std::begin(kDims), std::end(kDims));
  dims.push_back({4, 0, 3});
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    const DType out = dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
    for (const Dims& d : dims) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          INFO(dtype_name(dtype) << " M " << d.m << " K " << d.k << " N " << d.n << " ta " << ta
                                 << " tb " << tb);
          const Tensor a = random_tensor(a_shape(d, ta), out, 41).to(dtype);
          const Tensor b = random_tensor(b_shape(d, tb), out, 42).to(dtype);
          const Tensor bias = random_tensor({d.n}, out, 43, -4.0, 4.0);
          const Shape shape{d.m, d.n};
          const Tensor expected = bias_product(ta, tb, a, b, bias, shape, Device::cpu(0));
          const Tensor fused = bias_product(ta, tb, a, b, bias, shape, gpu());
          Tensor broadcast;
          {
            BiasEpilogue off(false);
            broadcast = bias_product(ta, tb, a, b, bias, shape, gpu());
          }
          const double k = std::max<double>(static_cast<double>(d.k), 1.0);
          check_close(fused, expected, tol(out, 1e-5, 1e-13), tol(out, 1e-6, 1e-15) * k);
          // On a card the two paths may pick kernels that sum K in other orders.
          check_close(fused, broadcast, tol(out, 1e-5, 1e-13), tol(out, 1e-6, 1e-15) * k);
        }
      }
    }
  }
  // A micro-batch's rows (a slice that starts 4 bytes past a 256-byte boundary) and a bias
  // as unaligned: the epilogue still runs for the operands (the heuristic is told their
  // alignment); the bias, under 16 bytes aligned, takes the broadcast path.
  const Tensor whole = random_tensor({9, 33}, DType::kFloat32, 47);
  const Tensor rows = whole.to(gpu()).reshape({9 * 33}).slice(1, 1 + 8 * 33).reshape({8, 33});
  const Tensor w = random_tensor({5, 33}, DType::kFloat32, 48);
  const Tensor long_bias = random_tensor({6}, DType::kFloat32, 49);
  const Tensor bias = long_bias.slice(0, 5);
  const Tensor odd_bias = long_bias.to(gpu()).slice(1, 6);
  const Tensor expected = ops::matmul_bias(whole.reshape({9 * 33}).slice(1, 1 + 8 * 33)
                                               .reshape({8, 33}),
                                           w, bias, false, true);
  check_close(ops::matmul_bias(rows, w.to(gpu()), bias.to(gpu()), false, true), expected, 1e-5,
              1e-6 * 33);
  check_close(ops::matmul_bias(rows, w.to(gpu()), odd_bias, false, true),
              ops::matmul_bias(whole.reshape({9 * 33}).slice(1, 1 + 8 * 33).reshape({8, 33}), w,
                               long_bias.slice(1, 6), false, true),
              1e-5, 1e-6 * 33);
  CHECK(cuda::bias_epilogue_refusal() == "");  // the epilogue ran wherever it was asked
}

// TF32 with the bias in the epilogue: both paths round the inputs to 10 mantissa bits.
TEST_CASE("cuda gemm_bias under TF32 stays within TF32 accuracy on both paths", "[cuda][gemm]") {
  if (!gpu_available_or_skip()) return;
  const Dims d{64, 256, 96};
  const Tensor a = random_tensor({d.m, d.k}, DType::kFloat32, 44);
  const Tensor b = random_tensor({d.n, d.k}, DType::kFloat32, 45);
  const Tensor bias = random_tensor({d.n}, DType::kFloat32, 46);
  const Tensor expected = bias_product(false, true, a, b, bias, {d.m, d.n}, Device::cpu(0));
  cuda::set_allow_tf32(true);
  const Tensor fused = bias_product(false, true, a, b, bias, {d.m, d.n}, gpu());
  Tensor broadcast;
  {
    BiasEpilogue off(false);
    broadcast = bias_product(false, true, a, b, bias, {d.m, d.n}, gpu());
  }
  cuda::set_allow_tf32(false);
  // Inputs rounded to 10 mantissa bits: each product within 2^-10 relative, K of them.
  check_close(fused, expected, 0.0, static_cast<double>(d.k) * std::ldexp(1.0, -10));
  check_close(fused, broadcast, 0.0, static_cast<double>(d.k) * std::ldexp(1.0, -11));
  CHECK(cuda::bias_epilogue_refusal() == "");
}

}  // namespace
}  // namespace pipewright::testing
