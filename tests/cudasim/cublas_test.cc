// The cuBLAS subset: GEMM and strided-batched GEMM against a naive double reference, argument
// checks, beta == 0, TF32 rounding, and the race on a handle's workspace shared by two streams;
// the mixed-precision GemmEx / GemmStridedBatchedEx (bfloat16 or float16 A and B, float C)
// exactly, the type combinations they refuse, and the element sizes they record; cuBLASLt's
// matmul with a bias epilogue.
#include <catch2/catch.hpp>

#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/cudasim/test_util.h"

using namespace cudasim::testing;

namespace {

template <typename T>
std::vector<T> random_matrix(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(rng));
  return v;
}

// C = alpha op(A) op(B) + beta C, column-major, in double.
template <typename T>
std::vector<double> reference(bool ta, bool tb, int m, int n, int k, double alpha,
                              const std::vector<T>& A, int lda, const std::vector<T>& B, int ldb,
                              double beta, const std::vector<T>& C, int ldc) {
  std::vector<double> out(C.begin(), C.end());
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        const double a = ta ? A[static_cast<size_t>(p + i * lda)] : A[static_cast<size_t>(i + p * lda)];
        const double b = tb ? B[static_cast<size_t>(j + p * ldb)] : B[static_cast<size_t>(p + j * ldb)];
        sum += a * b;
      }
      const size_t c = static_cast<size_t>(i + j * ldc);
      out[c] = alpha * sum + (beta == 0 ? 0.0 : beta * static_cast<double>(C[c]));
    }
  }
  return out;
}

template <typename T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  (void)cudaMalloc(reinterpret_cast<void**>(&p), v.size() * sizeof(T));
  REQUIRE_CUDA(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

template <typename T>
std::vector<T> to_host(const T* p, size_t n) {
  std::vector<T> v(n);
  REQUIRE_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// Runs one GEMM through cuBLAS; returns the max abs error against the double reference.
template <typename T>
double gemm_error(cublasHandle_t h, bool ta, bool tb, int m, int n, int k, int pad, double beta,
                  unsigned seed) {
  const int lda = std::max(1, ta ? k : m) + pad, ldb = std::max(1, tb ? n : k) + pad,
            ldc = m + pad;
  const auto A = random_matrix<T>(static_cast<size_t>(lda * (ta ? m : k)), seed);
  const auto B = random_matrix<T>(static_cast<size_t>(ldb * (tb ? k : n)), seed + 1);
  const auto C = random_matrix<T>(static_cast<size_t>(ldc * n), seed + 2);
  T *a = to_device(A), *b = to_device(B), *c = to_device(C);
  const T alpha = T(1.5), beta_t = static_cast<T>(beta);
  const auto op = [](bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; };
  cublasStatus_t status;
  if constexpr (std::is_same_v<T, float>) {
    status = cublasSgemm(h, op(ta), op(tb), m, n, k, &alpha, a, lda, b, ldb, &beta_t, c, ldc);
  } else {
    status = cublasDgemm(h, op(ta), op(tb), m, n, k, &alpha, a, lda, b, ldb, &beta_t, c, ldc);
  }
  REQUIRE(status == CUBLAS_STATUS_SUCCESS);
  const auto got = to_host(c, C.size());
  const auto want = reference(ta, tb, m, n, k, 1.5, A, lda, B, ldb, beta, C, ldc);
  double err = 0;
  for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]));
  (void)cudaFree(a);
  (void)cudaFree(b);
  (void)cudaFree(c);
  return err;
}

}  // namespace

TEST_CASE("gemm: every transpose combination, odd leading dimensions, S and D") {
  clean();
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (int pad : {0, 3}) {
        INFO("ta " << ta << " tb " << tb << " pad " << pad);
        CHECK(gemm_error<double>(h, ta, tb, 7, 5, 9, pad, 0.5, 11) < 1e-12);
        CHECK(gemm_error<float>(h, ta, tb, 7, 5, 9, pad, 0.5, 12) < 1e-5);
        CHECK(gemm_error<double>(h, ta, tb, 3, 4, 0, pad, -2.0, 13) < 1e-15);  // k = 0
      }
    }
  }
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasDestroy(h) == CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST_CASE("gemm: invalid arguments are rejected, m = 0 is a no-op") {
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const float one = 1, zero = 0;
  float* p = nullptr;
  REQUIRE_CUDA(cudaMalloc(reinterpret_cast<void**>(&p), 64 * sizeof(float)));
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, p, 3, p, 4, &zero, p, 4) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)).find("lda") !=
        std::string::npos);
  CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 4, 4, 5, &one, p, 4, p, 5, &zero, p, 4) ==
        CUBLAS_STATUS_INVALID_VALUE);  // lda >= k for T
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, 4, 6, 4, &one, p, 4, p, 4, &zero, p, 4) ==
        CUBLAS_STATUS_INVALID_VALUE);  // ldb >= n for T
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, p, 4, p, 4, &zero, p, 3) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSgemm(h, static_cast<cublasOperation_t>(7), CUBLAS_OP_N, 4, 4, 4, &one, p, 4, p, 4,
                    &zero, p, 4) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &one, p, 4, p, 4, &zero, p, 4) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 4, 4, &one, nullptr, 1, nullptr, 4, &zero,
                    nullptr, 1) == CUBLAS_STATUS_SUCCESS);
  CHECK(std::string(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE)) ==
        "CUBLAS_STATUS_INVALID_VALUE");
  // an operand out of its allocation is an illegal address (sticky), like a kernel's
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 9, 9, 9, &one, p, 9, p, 9, &zero, p, 9) ==
        CUBLAS_STATUS_EXECUTION_FAILED);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  clean();
  REQUIRE_CUDA(cudaFree(p));
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("gemm strided batched: each product at its strides, a stride 0 shares an operand") {
  clean();
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const int m = 3, n = 4, k = 5, batch = 3;
  const auto A = random_matrix<double>(m * k * batch, 31), B = random_matrix<double>(k * n, 32);
  double *a = to_device(A), *b = to_device(B), *c = nullptr;
  REQUIRE_CUDA(cudaMalloc(reinterpret_cast<void**>(&c), m * n * batch * sizeof(double)));
  const double one = 1, zero = 0;
  REQUIRE(cublasDgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, m * k, b, k,
                                    0, &zero, c, m, m * n, batch) == CUBLAS_STATUS_SUCCESS);
  const auto got = to_host(c, static_cast<size_t>(m * n * batch));
  for (int i = 0; i < batch; ++i) {
    INFO("product " << i);
    const std::vector<double> a_i(A.begin() + i * m * k, A.begin() + (i + 1) * m * k);
    const auto want = reference(false, false, m, n, k, 1.0, a_i, m, B, k, 0.0,
                                std::vector<double>(m * n, 0.0), m);
    for (int e = 0; e < m * n; ++e) CHECK(std::abs(got[i * m * n + e] - want[e]) < 1e-14);
  }
  // Products whose C overlap, and negative strides, are refused.
  CHECK(cublasDgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, m * k, b, k,
                                  0, &zero, c, m, m * n - 1, batch) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasDgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, -1, b, k, 0,
                                  &zero, c, m, m * n, batch) == CUBLAS_STATUS_INVALID_VALUE);
  // The last product's operands count: a batch reaching past A's allocation is refused.
  CHECK(cublasDgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, m * k + 1, b,
                                  k, 0, &zero, c, m, m * n, batch) == CUBLAS_STATUS_EXECUTION_FAILED);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  clean();
  (void)cudaFree(a);
  (void)cudaFree(b);
  (void)cudaFree(c);
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("gemm: beta == 0 never reads C (NaN there is ignored)") {
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const std::vector<float> a{1, 2, 3, 4}, nan(4, std::numeric_limits<float>::quiet_NaN());
  float *da = to_device(a), *dc = to_device(nan);
  const float one = 1, zero = 0;
  REQUIRE(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, da, 2, da, 2, &zero, dc, 2) ==
          CUBLAS_STATUS_SUCCESS);
  const auto c = to_host(dc, 4);
  CHECK(c == std::vector<float>{7, 10, 15, 22});
  (void)cudaFree(da);
  (void)cudaFree(dc);
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("gemm: TF32 math rounds the operands; default math is full FP32") {
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const int n = 64;
  const auto A = random_matrix<float>(n * n, 21), B = random_matrix<float>(n * n, 22);
  float *a = to_device(A), *b = to_device(B), *c = nullptr;
  REQUIRE_CUDA(cudaMalloc(reinterpret_cast<void**>(&c), n * n * sizeof(float)));
  const auto want = reference(false, false, n, n, n, 1.0, A, n, B, n, 0.0,
                              std::vector<float>(n * n, 0.0f), n);
  const float one = 1, zero = 0;
  auto max_rel_error = [&] {
    REQUIRE(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n) ==
            CUBLAS_STATUS_SUCCESS);
    const auto got = to_host(c, n * n);
    double err = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err = std::max(err, std::abs(got[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    return err / scale;
  };
  cublasMath_t mode;
  REQUIRE(cublasGetMathMode(h, &mode) == CUBLAS_STATUS_SUCCESS);
  CHECK(mode == CUBLAS_DEFAULT_MATH);
  const double fp32 = max_rel_error();
  REQUIRE(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_STATUS_SUCCESS);
  const double tf32 = max_rel_error();
  CHECK(fp32 < 1e-6);
  CHECK(tf32 > 1e-4);
  CHECK(tf32 < 5e-3);
  (void)cudaFree(a);
  (void)cudaFree(b);
  (void)cudaFree(c);
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("gemm: one handle's workspace shared by two streams is a race") {
  clean();
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  cudaStream_t s1, s2;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  const std::vector<float> v(16, 1.0f);
  float *a = to_device(v), *c1 = to_device(v), *c2 = to_device(v);
  const float one = 1, zero = 0;
  REQUIRE(cublasSetStream(h, s1) == CUBLAS_STATUS_SUCCESS);
  cudaStream_t got;
  REQUIRE(cublasGetStream(h, &got) == CUBLAS_STATUS_SUCCESS);
  CHECK(got == s1);
  REQUIRE(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 4, a, 4, &zero, c1, 4) ==
          CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasSetStream(h, s2) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 4, a, 4, &zero, c2, 4) ==
        CUBLAS_STATUS_EXECUTION_FAILED);
  const std::string text = cublasGetStatusString(CUBLAS_STATUS_EXECUTION_FAILED);
  CHECK(text.find("stream race") != std::string::npos);
  CHECK(text.find("argument 3") != std::string::npos);  // the workspace
  CHECK(cudasim::take_race_reports().size() == 1);
  (void)cudaGetLastError();
  // the fix: a workspace per stream
  void* ws = nullptr;
  REQUIRE_CUDA(cudaMalloc(&ws, 1024));
  REQUIRE(cublasSetWorkspace(h, ws, 1024) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 4, a, 4, &zero, c2, 4) ==
        CUBLAS_STATUS_SUCCESS);
  CHECK(cudasim::take_race_reports().empty());
  REQUIRE_CUDA(cudaStreamSynchronize(s2));
  CHECK(to_host(c2, 16) == std::vector<float>(16, 4.0f));
  // cublasSetStream resets the workspace to the handle's default, as cuBLAS does: a workspace
  // set before it is gone, so the shared default workspace races again.
  REQUIRE(cublasSetStream(h, s2) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 4, a, 4, &zero, c2, 4) ==
        CUBLAS_STATUS_EXECUTION_FAILED);
  CHECK(cudasim::take_race_reports().size() == 1);
  (void)cudaGetLastError();
  REQUIRE_CUDA(cudaDeviceSynchronize());
  REQUIRE_CUDA(cudaStreamDestroy(s1));
  REQUIRE_CUDA(cudaStreamDestroy(s2));
  for (float* p : {a, c1, c2}) REQUIRE_CUDA(cudaFree(p));
  REQUIRE_CUDA(cudaFree(ws));
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

// ---- Mixed precision: cublasGemmEx / cublasGemmStridedBatchedEx, 16-bit A and B, float C ----
// Inputs are multiples of 1/8 up to 8 in magnitude: exact in bfloat16 and float16, and every
// product and sum below is exact in float (at most 17 significant bits), so results compare
// exactly with the double reference whatever the summation order.
namespace {

// Multiples of 1/8 in [-8, 8].
std::vector<float> eighths(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-64, 64);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(dist(rng)) / 8;
  return v;
}

// The bfloat16 / float16 bits of x, which must be exactly representable and, for float16,
// zero or normal (REQUIREd).
uint16_t half_bits(cudaDataType type, float x) {
  if (type == CUDA_R_16BF) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    REQUIRE((u & 0xFFFFu) == 0);  // bfloat16 is float32's upper half
    return static_cast<uint16_t>(u >> 16);
  }
  if (x == 0) return 0;
  int e;
  const float m = std::frexp(std::fabs(x), &e);  // |x| = m 2^e, m in [0.5, 1)
  const float mantissa = (2 * m - 1) * 1024;       // 10 bits after the leading 1
  REQUIRE(mantissa == std::floor(mantissa));
  REQUIRE(e - 1 >= -14);
  REQUIRE(e - 1 <= 15);
  return static_cast<uint16_t>((x < 0 ? 0x8000u : 0u) | static_cast<unsigned>(e - 1 + 15) << 10 |
                               static_cast<unsigned>(mantissa));
}

std::vector<uint16_t> half_bits(cudaDataType type, const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = half_bits(type, v[i]);
  return out;
}

const char* type_name(cudaDataType type) { return type == CUDA_R_16BF ? "bf16" : "fp16"; }

}  // namespace

TEST_CASE("gemm ex: bf16 and fp16 operands into float C, every transpose, beta 0 and 1, exact") {
  clean();
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const int m = 5, n = 4, k = 7;
  for (cudaDataType type : {CUDA_R_16BF, CUDA_R_16F}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.0f, 1.0f}) {
          const int pad = ta ? 2 : 0;  // a leading dimension past the rows, sometimes
          INFO(type_name(type) << " ta " << ta << " tb " << tb << " beta " << beta);
          const int lda = (ta ? k : m) + pad, ldb = tb ? n : k, ldc = m + 1;
          const auto A = eighths(static_cast<size_t>(lda * (ta ? m : k)), 41);
          const auto B = eighths(static_cast<size_t>(ldb * (tb ? k : n)), 42);
          const auto C = eighths(static_cast<size_t>(ldc * n), 43);
          uint16_t *a = to_device(half_bits(type, A)), *b = to_device(half_bits(type, B));
          float* c = to_device(C);
          const float alpha = 1.5f;
          REQUIRE(cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                               m, n, k, &alpha, a, type, lda, b, type, ldb, &beta, c, CUDA_R_32F,
                               ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) ==
                  CUBLAS_STATUS_SUCCESS);
          const auto got = to_host(c, C.size());
          const auto want = reference(ta, tb, m, n, k, 1.5, A, lda, B, ldb, beta, C, ldc);
          for (size_t i = 0; i < got.size(); ++i) {
            INFO("element " << i);
            CHECK(got[i] == want[i]);  // C's padding rows too: left as they were
          }
          (void)cudaFree(a);
          (void)cudaFree(b);
          (void)cudaFree(c);
        }
      }
    }
  }
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("gemm ex: fp16 subnormals widen exactly") {
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  // A [1, 3] = 2^-24, 1023·2^-24 (the largest subnormal), -512·2^-24; B [3, 1] = 2^14 each.
  const std::vector<uint16_t> A{0x0001, 0x03FF, 0x8200}, B{0x7400, 0x7400, 0x7400};
  uint16_t *a = to_device(A), *b = to_device(B);
  float* c = to_device(std::vector<float>{0.0f});
  const float one = 1, zero = 0;
  REQUIRE(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 3, &one, a, CUDA_R_16F, 1, b,
                       CUDA_R_16F, 3, &zero, c, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  CHECK(to_host(c, 1)[0] == (1.0f + 1023.0f - 512.0f) / 1024.0f);
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c)}) {
    (void)cudaFree(p);
  }
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("gemm strided batched ex: each product at its strides, bf16 and fp16, beta 1") {
  clean();
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const int m = 3, n = 4, k = 5, batch = 3;
  for (cudaDataType type : {CUDA_R_16BF, CUDA_R_16F}) {
    INFO(type_name(type));
    // A [k, m] per product read transposed; B [k, n] one matrix shared by every product.
    const auto A = eighths(static_cast<size_t>(k * m * batch), 51), B = eighths(k * n, 52);
    const auto C = eighths(static_cast<size_t>(m * n * batch), 53);
    uint16_t *a = to_device(half_bits(type, A)), *b = to_device(half_bits(type, B));
    float* c = to_device(C);
    const float half = 0.5f, one = 1;
    REQUIRE(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &half, a, type, k,
                                       k * m, b, type, k, 0, &one, c, CUDA_R_32F, m, m * n,
                                       batch, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    const auto got = to_host(c, C.size());
    for (int i = 0; i < batch; ++i) {
      INFO("product " << i);
      const std::vector<float> a_i(A.begin() + i * k * m, A.begin() + (i + 1) * k * m);
      const std::vector<float> c_i(C.begin() + i * m * n, C.begin() + (i + 1) * m * n);
      const auto want = reference(true, false, m, n, k, 0.5, a_i, k, B, k, 1.0, c_i, m);
      for (int e = 0; e < m * n; ++e) CHECK(got[i * m * n + e] == want[e]);
    }
    (void)cudaFree(a);
    (void)cudaFree(b);
    (void)cudaFree(c);
  }
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("gemm ex: type combinations other than 16-bit A, B and float C are refused") {
  clean();
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  void* p = nullptr;
  REQUIRE_CUDA(cudaMalloc(&p, 256));
  const float one = 1, zero = 0;
  auto gemm_ex = [&](cudaDataType a, cudaDataType b, cudaDataType c, cublasComputeType_t compute,
                     cublasGemmAlgo_t algo = CUBLAS_GEMM_DEFAULT) {
    return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, p, a, 4, p, b, 4, &zero, p, c,
                        4, compute, algo);
  };
  CHECK(gemm_ex(CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F) ==
        CUBLAS_STATUS_NOT_SUPPORTED);
  const std::string text = cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED);
  INFO(text);
  CHECK(text.find("cublasGemmEx A CUDA_R_16BF B CUDA_R_16F C CUDA_R_32F") != std::string::npos);
  CHECK(gemm_ex(CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F) ==
        CUBLAS_STATUS_NOT_SUPPORTED);  // 16-bit C: a real cuBLAS combination, not simulated
  CHECK(gemm_ex(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F) ==
        CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(gemm_ex(CUDA_R_16F, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_16F) ==
        CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(gemm_ex(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16F) ==
        CUBLAS_STATUS_NOT_SUPPORTED);  // would down-convert bfloat16 to float16
  CHECK(gemm_ex(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_ALGO0) ==
        CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)).find("CUBLAS_GEMM_DEFAULT") !=
        std::string::npos);
  CHECK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, p, CUDA_R_16F, 4,
                                   16, p, CUDA_R_16F, 4, 16, &zero, p, CUDA_R_64F, 4, 16, 1,
                                   CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
  // The operands' own FAST mode is the same math, and accepted.
  CHECK(gemm_ex(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16BF) ==
        CUBLAS_STATUS_SUCCESS);
  CHECK(gemm_ex(CUDA_R_16F, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16F) ==
        CUBLAS_STATUS_SUCCESS);
  // The operand checks of the S/D GEMMs apply.
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, p, CUDA_R_16BF, 3, p,
                     CUDA_R_16BF, 4, &zero, p, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)).find("lda too small") !=
        std::string::npos);
  REQUIRE_CUDA(cudaDeviceSynchronize());
  REQUIRE_CUDA(cudaFree(p));
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("gemm ex: A and B are recorded as 2-byte elements, C as 4-byte ones") {
  clean();
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const int m = 3, n = 2, k = 4;
  // Allocations of exactly A's, B's and C's bytes: a larger element size would reach past them
  // (refused as an illegal address), a smaller one miss the last elements below.
  uint16_t *a = nullptr, *b = nullptr;
  float* c = nullptr;
  REQUIRE_CUDA(cudaMalloc(reinterpret_cast<void**>(&a), m * k * 2));
  REQUIRE_CUDA(cudaMalloc(reinterpret_cast<void**>(&b), k * n * 2));
  REQUIRE_CUDA(cudaMalloc(reinterpret_cast<void**>(&c), m * n * 4));
  cudaStream_t s1, s2;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  REQUIRE(cublasSetStream(h, s1) == CUBLAS_STATUS_SUCCESS);
  const float one = 1, zero = 0;
  REQUIRE(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, CUDA_R_16BF, m, b,
                       CUDA_R_16BF, k, &zero, c, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  // Another stream, unordered (the detector looks at issue order, not timing): writing A's
  // last element or reading C's last one races with the GEMM.
  CHECK(fake_kernel(s2, "write A's last element", {{a + m * k - 1, 2, true, 0}}) ==
        cudaErrorIllegalState);
  (void)cudaGetLastError();
  CHECK(fake_kernel(s2, "read C's last element", {{c + m * n - 1, 4, false, 0}}) ==
        cudaErrorIllegalState);
  (void)cudaGetLastError();
  CHECK(cudasim::take_race_reports().size() == 2);
  REQUIRE_CUDA(cudaDeviceSynchronize());
  REQUIRE_CUDA(cudaStreamDestroy(s1));
  REQUIRE_CUDA(cudaStreamDestroy(s2));
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c)}) {
    REQUIRE_CUDA(cudaFree(p));
  }
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

// cuBLASLt's matmul as pipewright calls it (cuda_kernels/gemm.cc): D = op(A) op(B) + bias,
// the bias (D's rows) added to every column, on the stream and workspace the call names;
// what cudasim does not run is refused, naming it; a destroyed layout is refused.
TEST_CASE("lt matmul: the bias epilogue, its refusals, a destroyed layout") {
  clean();
  cublasLtHandle_t lt = nullptr;
  REQUIRE(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
  const int m = 5, n = 4, k = 3;
  const auto A = random_matrix<float>(m * k, 70), B = random_matrix<float>(k * n, 71);
  const auto bias = random_matrix<float>(m, 72);
  float *a = to_device(A), *b = to_device(B), *bias_d = to_device(bias);
  float* d = to_device(std::vector<float>(m * n, 0.0f));
  cublasLtMatmulDesc_t desc = nullptr;
  REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
          CUBLAS_STATUS_SUCCESS);
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  const void* bias_pointer = bias_d;
  REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                         sizeof epilogue) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_pointer,
                                         sizeof bias_pointer) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  REQUIRE(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m) == CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  REQUIRE(cublasLtMatmul(lt, desc, &one, a, la, b, lb, &zero, d, ld, d, ld, nullptr, nullptr, 0,
                         nullptr) == CUBLAS_STATUS_SUCCESS);
  const auto got = to_host(d, m * n);
  const auto product = reference(false, false, m, n, k, 1.0, A, m, B, k, 0.0,
                                 std::vector<float>(m * n, 0.0f), m);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      CHECK(std::abs(got[i + j * m] - (product[i + j * m] + bias[i])) < 1e-6);
    }
  }
  // A matrix 4 bytes past a boundary: declined for the default preference's 256 bytes; run
  // with an algorithm the heuristic chose for 4-byte alignment.
  std::vector<float> shifted(m * k + 1, 0.0f);
  std::copy(A.begin(), A.end(), shifted.begin() + 1);
  float* a_shifted = to_device(shifted);
  CHECK(cublasLtMatmul(lt, desc, &one, a_shifted + 1, la, b, lb, &zero, d, ld, d, ld, nullptr,
                       nullptr, 0, nullptr) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)).find("less aligned") !=
        std::string::npos);
  cublasLtMatmulPreference_t preference = nullptr;
  REQUIRE(cublasLtMatmulPreferenceCreate(&preference) == CUBLAS_STATUS_SUCCESS);
  const uint32_t four = 4;
  REQUIRE(cublasLtMatmulPreferenceSetAttribute(preference,
                                               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &four,
                                               sizeof four) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t choice{};
  int found = 0;
  REQUIRE(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, preference, 1, &choice,
                                         &found) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(found == 1);
  CHECK(cublasLtMatmul(lt, desc, &one, a_shifted + 1, la, b, lb, &zero, d, ld, d, ld,
                       &choice.algo, nullptr, 0, nullptr) == CUBLAS_STATUS_SUCCESS);
  CHECK(to_host(d, m * n) == got);  // the same product and bias
  cublasLtMatmulAlgo_t foreign{};
  CHECK(cublasLtMatmul(lt, desc, &one, a, la, b, lb, &zero, d, ld, d, ld, &foreign, nullptr, 0,
                       nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  REQUIRE(cublasLtMatmulPreferenceDestroy(preference) == CUBLAS_STATUS_SUCCESS);
  (void)cudaFree(a_shifted);
  // C and D apart: cudasim runs them as one matrix only.
  float* other = to_device(std::vector<float>(m * n, 0.0f));
  CHECK(cublasLtMatmul(lt, desc, &one, a, la, b, lb, &zero, other, ld, d, ld, nullptr, nullptr,
                       0, nullptr) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)).find("C and D") !=
        std::string::npos);
  // Shapes that do not chain: op(A) 5x3 with op(B) 4x3.
  const cublasOperation_t t = CUBLAS_OP_T;
  REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof t) ==
          CUBLAS_STATUS_SUCCESS);
  CHECK(cublasLtMatmul(lt, desc, &one, a, la, b, lb, &zero, d, ld, d, ld, nullptr, nullptr, 0,
                       nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  REQUIRE(cublasLtMatrixLayoutDestroy(lb) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasLtMatmul(lt, desc, &one, a, la, b, lb, &zero, d, ld, d, ld, nullptr, nullptr, 0,
                       nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasLtMatrixLayoutDestroy(lb) == CUBLAS_STATUS_INVALID_VALUE);  // twice
  REQUIRE(cublasLtMatrixLayoutDestroy(la) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutDestroy(ld) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatmulDescDestroy(desc) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtDestroy(lt) == CUBLAS_STATUS_SUCCESS);
  for (float* p : {a, b, bias_d, d, other}) (void)cudaFree(p);
}
