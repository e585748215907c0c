// GEMM through OpenBLAS: c = alpha * op(a) * op(b) + beta * c on the row-major tensors, op(x)
// = x or xᵀ as a flag to cblas_?gemm (no transposed copy is ever made).
//
// Note [GEMM backend]
// Why OpenBLAS and not Eigen (measured in docs/BENCHMARKS.md, "GEMM backend"): Debian builds
// OpenBLAS with DYNAMIC_ARCH, so it picks the AVX-512 kernels on a CPU that has them and the
// AVX2 ones elsewhere at start-up, while our own code stays compiled for x86-64-v3 and runs on
// any AVX2 machine. Eigen only uses the vector width it was compiled for (AVX2 by default),
// and at micro-batch shapes (8-256 rows) its row-major products ran at 0.4-0.7x OpenBLAS's on
// one thread.
// OPENBLAS_CORETYPE in the environment overrides the choice (OpenBLAS's own setting).
// Eigen computes every product instead under set_gemm_backend(GemmBackend::kEigen) (gemm.h).
//
// Threads: one runtime for intra-op threads (run_parts, tensor/parallel.h). OpenBLAS is told to
// use one thread of its own, once, and gemm() splits C into as many blocks as the calling
// thread's intra_op_threads() allow, one cblas call per block. So a pipeline worker with a
// budget of one thread runs its GEMMs on itself, two workers never oversubscribe two cores,
// and concurrent calls from several workers are safe (the pthread build of OpenBLAS, which
// third_party/openblas pins, is made for concurrent callers: its buffer pool is guarded, and a
// call with one thread runs on the caller without its thread server). The block split is
// along the larger of M and N: each block packs only its slice of the operand that dimension
// indexes and shares nothing with the others. Helpers that wait sleep after a short spin, so
// a busy machine does not turn the split into spinning (Note [Waiting without burning a
// core]; docs/BENCHMARKS.md, "Contention").
//
// Note [Mixed-precision GEMM on the CPU]
// bfloat16 or float16 operands with a float32 c (the matmuls of a Precision policy,
// autograd/precision.h) are widened to float32 — exactly: every 16-bit value is a float32 —
// and multiplied by the float32 GEMM. That is the product cuBLAS's GemmEx computes with
// CUBLAS_COMPUTE_32F (each product of two 16-bit values is exact in float32, the sums are
// float32), up to the order of the sums; widening costs O(MK + KN) beside the O(MNK) product.
// That gives the numerics of 16 bits, not their speed. Where the CPU multiplies bfloat16 pairs
// itself, bfloat16 operands go to a kernel of ours instead (bf16_gemm(), gemm.h): AMX tiles
// (Note [bf16 GEMM on AMX], gemm_amx.cc), else VDPBF16PS (Note [bf16 GEMM on AVX512-BF16],
// gemm_avx512_bf16.cc), both on one packed frame (Note [bf16 GEMM blocks], gemm_bf16.cc).
// float16 operands, which neither multiplies, and every 16-bit product under the Eigen backend
// (the reference) are still widened here.
#include "tensor/cpu/gemm.h"

#include <cblas.h>

// Eigen serves the few-row products (Note [Few rows]) and the Eigen backend (gemm.h); the
// threads are ours (the split below), never Eigen's own.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>

#include "tensor/cpu/common.h"
#include "tensor/cpu/gemm_bf16.h"
#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {
namespace {

GemmBackend backend_from_environment() {
  const char* value = std::getenv("PIPEWRIGHT_CPU_GEMM");
  if (value == nullptr || std::string(value) == "openblas") return GemmBackend::kOpenBlas;
  if (std::string(value) == "eigen") return GemmBackend::kEigen;
  throw std::invalid_argument("PIPEWRIGHT_CPU_GEMM: expected openblas or eigen, got '" +
                              std::string(value) + "'");
}

// Unset until the first gemm_backend() reads the environment.
std::atomic<int> g_backend{-1};

// Below this many flops a GEMM stays on the calling thread (waking the helpers costs a few
// microseconds, what a 2^20-flop product takes on one core).
constexpr double kParallelFlops = double(1 << 20);
// Blocks of N are multiples of this many columns (a cache line of float32, a full AVX-512
// register), so no block ends in a partial vector that its neighbour's first one shares.
constexpr int64_t kColumnAlign = 16;

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
               double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
               double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

// Note [Few rows]
// OpenBLAS 0.3.21 is slow on products whose C has very few rows: measured on this project's
// AVX-512 machine, at 8 rows its x·Wᵀ and dY·W run slower than Eigen's (AVX2 only), while
// from 32 rows on OpenBLAS leads, by more as the rows grow (the rates: docs/BENCHMARKS.md,
// "GEMM backend").
// So C with at most kFewRows rows goes to Eigen's GEMM (same operation, same layout: Maps
// over the row-major buffers with their leading dimensions), everything else to OpenBLAS.
// A pipeline with 16+ micro-batches of a 256-row batch meets such products.
constexpr int64_t kFewRows = 8;

// The same product through Eigen: the few-row ones, and all of them under GemmBackend::kEigen.
template <class T>
void eigen_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  const Eigen::Map<const Matrix, 0, Stride> A(a, trans_a ? k : m, trans_a ? m : k, Stride(lda));
  const Eigen::Map<const Matrix, 0, Stride> B(b, trans_b ? n : k, trans_b ? k : n, Stride(ldb));
  Eigen::Map<Matrix, 0, Stride> C(c, m, n, Stride(ldc));
  // BLAS semantics: with beta 0, C is not read (NaN there does not survive).
  if (beta != T(0) && beta != T(1)) C *= beta;
  auto accumulate = [&](const auto& op_a, const auto& op_b) {
    if (beta == T(0)) {
      C.noalias() = alpha * op_a * op_b;
    } else {
      C.noalias() += alpha * op_a * op_b;
    }
  };
  if (!trans_a && !trans_b) accumulate(A, B);
  if (!trans_a && trans_b) accumulate(A, B.transpose());
  if (trans_a && !trans_b) accumulate(A.transpose(), B);
  if (trans_a && trans_b) accumulate(A.transpose(), B.transpose());
}

/// One product on the calling thread: Eigen for few rows (Note [Few rows]) and under the Eigen
/// backend (gemm.h), else OpenBLAS.
template <class T>
void gemm_on_this_thread(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
                         const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
                         int64_t ldc) {
  if (m <= kFewRows || gemm_backend() == GemmBackend::kEigen) {
    eigen_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    blas_gemm(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k,
              alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

/// The bfloat16 product on the calling thread, by a kernel of ours: native_bf16() chose one.
/// (Were the kernel set to kWidened meanwhile, this still runs one this CPU has.)
void gemm_on_this_thread(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb,
                         float beta, float* c, int64_t ldc) {
  if (bf16_gemm() == Bf16Gemm::kAmx || !avx512_bf16_available()) {
    gemm_bf16_amx(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    gemm_bf16_avx512(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

/// Throws std::invalid_argument when a size exceeds the 32-bit BLAS interface.
void check_blas_dims(const char* op, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb) {
  constexpr int64_t kMaxDim = std::numeric_limits<blasint>::max();
  if (m > kMaxDim || n > kMaxDim || k > kMaxDim || lda > kMaxDim || ldb > kMaxDim) {
    throw std::invalid_argument(std::string(op) + ": a dimension exceeds the BLAS limit of " +
                                std::to_string(kMaxDim) + " (m=" + std::to_string(m) +
                                ", n=" + std::to_string(n) + ", k=" + std::to_string(k) + ")");
  }
}

/// One product, C split over the calling thread's intra-op threads when it is large enough.
/// In: the operands' type, T or BFloat16 (with T = float).
template <class In, class T>
void gemm_split(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const In* a,
                int64_t lda, const In* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (k == 0) {  // BLAS would scale c by beta; beta == 0 must also clear NaN
    for (int64_t i = 0; i < m * n; ++i) c[i] = beta == T(0) ? T(0) : beta * c[i];
    return;
  }
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * k;
  const bool split_n = n >= m;
  // bfloat16 kernels compute C in 32-column blocks (Note [bf16 GEMM blocks], gemm_bf16.cc).
  constexpr int64_t align = std::is_same_v<In, BFloat16> ? bf16::kBlock : kColumnAlign;
  const int64_t units = split_n ? (n + align - 1) / align : m;
  const int64_t threads =
      flops < kParallelFlops ? 1 : std::min<int64_t>(intra_op_threads(), units);
  if (threads <= 1) {
    gemm_on_this_thread(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // A block per thread, taken from a shared counter (Note [Waiting without burning a core],
  // tensor/parallel.h): a block whose thread the scheduler keeps off its core is taken by
  // the running one. Each block of C is one product of its own.
  const int64_t parts = threads;
  run_parts(parts, [&](int64_t p) {
    const int64_t lo = units * p / parts, hi = units * (p + 1) / parts;
    if (split_n) {
      // Columns [j0, j1) of C need columns [j0, j1) of op(B): B[:, j0:j1] or rows j0:j1 of Bᵀ.
      const int64_t j0 = lo * align, j1 = std::min(n, hi * align);
      if (j1 <= j0) return;
      const In* b_block = trans_b ? b + j0 * ldb : b + j0;
      gemm_on_this_thread(trans_a, trans_b, m, j1 - j0, k, alpha, a, lda, b_block, ldb, beta,
                          c + j0, ldc);
    } else {
      // Rows [lo, hi) of C need rows [lo, hi) of op(A): A[lo:hi, :] or columns lo:hi of Aᵀ.
      const In* a_block = trans_a ? a + lo : a + lo * lda;
      if constexpr (std::is_same_v<In, BFloat16>) {
        gemm_on_this_thread(trans_a, trans_b, hi - lo, n, k, alpha, a_block, lda, b, ldb, beta,
                            c + lo * ldc, ldc);
      } else if (gemm_backend() == GemmBackend::kEigen) {
        eigen_gemm(trans_a, trans_b, hi - lo, n, k, alpha, a_block, lda, b, ldb, beta,
                   c + lo * ldc, ldc);
      } else {
        blas_gemm(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                  hi - lo, n, k, alpha, a_block, lda, b, ldb, beta, c + lo * ldc, ldc);
      }
    }
  });
}

template <class T, class In = T>
void gemm_typed(bool trans_a, bool trans_b, T alpha, const Tensor& a, const Tensor& b, T beta,
                Tensor& c) {
  const int64_t m = c.size(0), n = c.size(1), k = trans_a ? a.size(0) : a.size(1);
  if (m == 0 || n == 0) return;
  check_blas_dims("gemm", m, n, k, a.size(1), b.size(1));
  gemm_split(trans_a, trans_b, m, n, k, alpha, a.data<In>(), a.size(1), b.data<In>(), b.size(1),
             beta, c.data<T>(), n);
}

// Note [Batched GEMM]
// A stack of products (attention's per-head Q·Kᵀ and P·V) is split across the intra-op
// threads by matrix: each thread runs whole products on itself, so no product is cut and
// the split costs nothing when there are at least as many matrices as threads. With fewer
// matrices than threads each product runs in turn, C split by gemm_split. An operand stack
// of one matrix (shared by every product) advances by 0.
template <class T, class In = T>
void gemm_batched_typed(bool trans_a, bool trans_b, T alpha, const Tensor& a_t, const Tensor& b_t,
                        T beta, Tensor& c_t) {
  const int64_t batch = c_t.size(0), m = c_t.size(1), n = c_t.size(2);
  const int64_t k = trans_a ? a_t.size(1) : a_t.size(2);
  const int64_t lda = a_t.size(2), ldb = b_t.size(2);
  const int64_t stride_a = a_t.size(0) == 1 ? 0 : a_t.size(1) * lda;
  const int64_t stride_b = b_t.size(0) == 1 ? 0 : b_t.size(1) * ldb;
  if (batch == 0 || m == 0 || n == 0) return;
  check_blas_dims("gemm_batched", m, n, k, lda, ldb);
  const In* a = a_t.data<In>();
  const In* b = b_t.data<In>();
  T* c = c_t.data<T>();
  const bool split_each = batch < intra_op_threads();
  auto products = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const In *ai = a + i * stride_a, *bi = b + i * stride_b;
      T* ci = c + i * m * n;
      if (split_each) {
        gemm_split(trans_a, trans_b, m, n, k, alpha, ai, lda, bi, ldb, beta, ci, n);
      } else if (k == 0) {
        for (int64_t e = 0; e < m * n; ++e) ci[e] = beta == T(0) ? T(0) : beta * ci[e];
      } else {
        gemm_on_this_thread(trans_a, trans_b, m, n, k, alpha, ai, lda, bi, ldb, beta, ci, n);
      }
    }
  };
  if (split_each) {
    products(0, batch);
    return;
  }
  // A stack of at least kParallelFlops runs on the intra-op threads: parallel_for's threshold
  // is kParallelThreshold cost units, so a product costs its flops scaled by their ratio.
  constexpr double kFlopsPerUnit = kParallelFlops / kParallelThreshold;
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * k;
  parallel_for(batch, static_cast<int64_t>(flops / kFlopsPerUnit) + 1, products);
}

/// bfloat16 operands go to a kernel of ours where the CPU has one (bf16_gemm(), gemm.h), under
/// the default backend; the Eigen backend (the reference) widens them as before.
bool native_bf16(DType dtype) {
  return dtype == DType::kBFloat16 && gemm_backend() == GemmBackend::kOpenBlas &&
         bf16_gemm() != Bf16Gemm::kWidened;
}

// Every bfloat16 kernel, for the name lookups below.
constexpr Bf16Gemm kBf16Gemms[] = {Bf16Gemm::kWidened, Bf16Gemm::kAvx512Bf16, Bf16Gemm::kAmx};

Bf16Gemm best_bf16_gemm() {
  if (amx_bf16_available()) return Bf16Gemm::kAmx;
  if (avx512_bf16_available()) return Bf16Gemm::kAvx512Bf16;
  return Bf16Gemm::kWidened;
}

/// The CPU's kernels by name, for messages.
std::string available_bf16_gemms() {
  std::string names;
  for (Bf16Gemm kernel : kBf16Gemms) {
    if (!bf16_gemm_available(kernel)) continue;
    names += std::string(names.empty() ? "" : ", ") + to_string(kernel);
  }
  return names;
}

void check_bf16_gemm(Bf16Gemm kernel, const std::string& origin) {
  if (!bf16_gemm_available(kernel)) {
    throw std::invalid_argument(origin + ": this CPU cannot run the " + to_string(kernel) +
                                " bfloat16 GEMM (it has: " + available_bf16_gemms() + ")");
  }
}

Bf16Gemm bf16_gemm_from_environment() {
  const char* value = std::getenv("PIPEWRIGHT_CPU_BF16_GEMM");
  if (value == nullptr) return best_bf16_gemm();
  for (Bf16Gemm kernel : kBf16Gemms) {
    if (std::string(value) == to_string(kernel)) {
      check_bf16_gemm(kernel, "PIPEWRIGHT_CPU_BF16_GEMM");
      return kernel;
    }
  }
  throw std::invalid_argument(
      "PIPEWRIGHT_CPU_BF16_GEMM: expected widened, avx512-bf16 or amx, got '" +
      std::string(value) + "'");
}

// Unset until the first bf16_gemm() reads the environment.
std::atomic<int> g_bf16_gemm{-1};

/// OpenBLAS is held to one thread of its own (Note [GEMM backend]).
void use_one_openblas_thread() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace

template <class T>
void gemm_tile(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
               int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  use_one_openblas_thread();
  gemm_on_this_thread(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
template void gemm_tile<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                               int64_t, const float*, int64_t, float, float*, int64_t);
template void gemm_tile<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*,
                                int64_t, const double*, int64_t, double, double*, int64_t);

const char* to_string(GemmBackend backend) {
  return backend == GemmBackend::kEigen ? "eigen" : "openblas";
}

GemmBackend gemm_backend() {
  int value = g_backend.load(std::memory_order_relaxed);
  if (value < 0) {
    value = static_cast<int>(backend_from_environment());
    int unset = -1;  // a concurrent set_gemm_backend wins
    if (!g_backend.compare_exchange_strong(unset, value)) value = unset;
  }
  return static_cast<GemmBackend>(value);
}

void set_gemm_backend(GemmBackend backend) {
  g_backend.store(static_cast<int>(backend), std::memory_order_relaxed);
}

const char* to_string(Bf16Gemm kernel) {
  switch (kernel) {
    case Bf16Gemm::kAvx512Bf16:
      return "avx512-bf16";
    case Bf16Gemm::kAmx:
      return "amx";
    case Bf16Gemm::kWidened:
      break;
  }
  return "widened";
}

bool bf16_gemm_available(Bf16Gemm kernel) {
  switch (kernel) {
    case Bf16Gemm::kAvx512Bf16:
      return avx512_bf16_available();
    case Bf16Gemm::kAmx:
      return amx_bf16_available();
    case Bf16Gemm::kWidened:
      break;
  }
  return true;
}

Bf16Gemm bf16_gemm() {
  int value = g_bf16_gemm.load(std::memory_order_relaxed);
  if (value < 0) {
    value = static_cast<int>(bf16_gemm_from_environment());
    int unset = -1;  // a concurrent set_bf16_gemm wins
    if (!g_bf16_gemm.compare_exchange_strong(unset, value)) value = unset;
  }
  return static_cast<Bf16Gemm>(value);
}

void set_bf16_gemm(Bf16Gemm kernel) {
  check_bf16_gemm(kernel, "set_bf16_gemm");
  g_bf16_gemm.store(static_cast<int>(kernel), std::memory_order_relaxed);
}

void gemm_batched(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
                  double beta, Tensor& c) {
  use_one_openblas_thread();
  if (native_bf16(a.dtype())) {  // Note [Mixed-precision GEMM on the CPU]
    gemm_batched_typed<float, BFloat16>(trans_a, trans_b, static_cast<float>(alpha), a, b,
                                        static_cast<float>(beta), c);
    return;
  }
  if (is_16_bit(a.dtype())) {  // Note [Mixed-precision GEMM on the CPU]
    gemm_batched_typed<float>(trans_a, trans_b, static_cast<float>(alpha), a.to(DType::kFloat32),
                              b.to(DType::kFloat32), static_cast<float>(beta), c);
    return;
  }
  dispatch_floating(a.dtype(), "gemm_batched", [&](auto zero) {
    using T = decltype(zero);
    gemm_batched_typed<T>(trans_a, trans_b, static_cast<T>(alpha), a, b, static_cast<T>(beta), c);
  });
}

void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b, double beta,
          Tensor& c) {
  use_one_openblas_thread();
  if (native_bf16(a.dtype())) {  // Note [Mixed-precision GEMM on the CPU]
    gemm_typed<float, BFloat16>(trans_a, trans_b, static_cast<float>(alpha), a, b,
                                static_cast<float>(beta), c);
    return;
  }
  if (is_16_bit(a.dtype())) {  // Note [Mixed-precision GEMM on the CPU]
    gemm_typed<float>(trans_a, trans_b, static_cast<float>(alpha), a.to(DType::kFloat32),
                      b.to(DType::kFloat32), static_cast<float>(beta), c);
    return;
  }
  dispatch_floating(a.dtype(), "gemm", [&](auto zero) {
    using T = decltype(zero);
    gemm_typed<T>(trans_a, trans_b, static_cast<T>(alpha), a, b, static_cast<T>(beta), c);
  });
}

// The bias copied into every row of c, then c += op(a)·op(b) (beta = 1): the BLAS adds C where
// its K loop puts it, one pass over c fewer than a product and an add.
void gemm_bias(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, const Tensor& bias,
               Tensor& c) {
  const int64_t rows = c.size(0);
  const size_t row_bytes = static_cast<size_t>(c.size(1)) * element_size(c.dtype());
  const auto* from = static_cast<const char*>(bias.raw_data());
  auto* to = static_cast<char*>(c.raw_data());
  for (int64_t r = 0; r < rows; ++r) std::memcpy(to + r * row_bytes, from, row_bytes);
  gemm(trans_a, trans_b, 1.0, a, b, 1.0, c);
}

}  // namespace pipewright::cpu
