// Which library computes the CPU's GEMMs (tensor/cpu/gemm.cc, Note [GEMM backend]).
//
// OpenBLAS is the default and the fast one. Eigen's GEMM is the second, correct, independently
// written implementation: switching to it changes nothing but the order in which each dot
// product is summed, so a run under each shows how far two correct GEMMs drift apart over
// training (the bound the GPU-versus-CPU tests take, docs/cuda.md "Precision against the CPU
// kernels"), and tells whether a numerical difference comes from the GEMM at all. It is what
// cudasim's simulated cuBLAS computes with.
#pragma once

#include <cstdint>

#include "tensor/half.h"

namespace pipewright::cpu {

enum class GemmBackend {
  kOpenBlas,  // cblas_sgemm / cblas_dgemm (Debian's runtime-dispatched OpenBLAS)
  kEigen,     // Eigen 3.4's GEMM over the same row-major buffers
};

/// "openblas" or "eigen".
const char* to_string(GemmBackend backend);

/// The backend every CPU GEMM of the process uses. Default kOpenBlas, or what the environment
/// variable PIPEWRIGHT_CPU_GEMM (`openblas` or `eigen`) says when it is set; any other value
/// makes the first GEMM throw std::invalid_argument naming it.
GemmBackend gemm_backend();

/// Sets the process's backend; GEMMs already running finish on the old one. Meant for tests
/// and benchmarks, between steps (it is not per thread).
void set_gemm_backend(GemmBackend backend);

/// Sets the backend for its lifetime, then restores the previous one.
class GemmBackendGuard {
 public:
  explicit GemmBackendGuard(GemmBackend backend) : previous_(gemm_backend()) {
    set_gemm_backend(backend);
  }
  ~GemmBackendGuard() { set_gemm_backend(previous_); }
  GemmBackendGuard(const GemmBackendGuard&) = delete;
  GemmBackendGuard& operator=(const GemmBackendGuard&) = delete;

 private:
  GemmBackend previous_;
};

/// How a product of two bfloat16 operands into float32 runs on the CPU (Note [Mixed-precision
/// GEMM on the CPU], gemm.cc). Every kernel sums exact products in float32; they differ in the
/// order of the sums and in speed.
enum class Bf16Gemm {
  kWidened,    // both operands widened to float32, then the float32 GEMM: any CPU
  kAvx512Bf16, // VDPBF16PS, our kernel (Note [bf16 GEMM on AVX512-BF16], gemm_avx512_bf16.cc)
  kAmx,        // AMX tiles, our kernel (Note [bf16 GEMM on AMX], gemm_amx.cc)
};

/// "widened", "avx512-bf16" or "amx".
const char* to_string(Bf16Gemm kernel);

/// Whether this CPU (and kernel) can run `kernel`; kWidened always. Decided once per process.
bool bf16_gemm_available(Bf16Gemm kernel);

/// The kernel bfloat16 × bfloat16 products use under the OpenBLAS backend (the Eigen backend,
/// the reference, always widens): what set_bf16_gemm chose, else what the environment variable
/// PIPEWRIGHT_CPU_BF16_GEMM (`widened`, `avx512-bf16` or `amx`) names, else the fastest this
/// CPU has (kAmx, then kAvx512Bf16, then kWidened). Throws std::invalid_argument when the
/// variable names no kernel or one this CPU lacks (naming it and the CPU's).
Bf16Gemm bf16_gemm();

/// Sets the process's bfloat16 kernel (for tests and benchmarks, between steps; not per
/// thread). Throws std::invalid_argument, naming it, when this CPU cannot run it.
void set_bf16_gemm(Bf16Gemm kernel);

/// Sets the bfloat16 kernel for its lifetime, then restores the previous one.
class Bf16GemmGuard {
 public:
  explicit Bf16GemmGuard(Bf16Gemm kernel) : previous_(bf16_gemm()) { set_bf16_gemm(kernel); }
  ~Bf16GemmGuard() { set_bf16_gemm(previous_); }
  Bf16GemmGuard(const Bf16GemmGuard&) = delete;
  Bf16GemmGuard& operator=(const Bf16GemmGuard&) = delete;

 private:
  Bf16Gemm previous_;
};

/// Whether this CPU and kernel run the bfloat16 GEMM on AMX tiles (Note [bf16 GEMM on AMX],
/// gemm_amx.cc): CPUID has AMX-TILE and AMX-BF16 and Linux grants the tile state. Decided once.
bool amx_bf16_available();

/// Whether this CPU has AVX512-BF16 (with AVX-512F and BW) and the OS saves the AVX-512 state
/// (Note [bf16 GEMM on AVX512-BF16], gemm_avx512_bf16.cc). Decided once.
bool avx512_bf16_available();

/// C [m, n] = alpha · op(A) · op(B) + beta · C for bfloat16 A, B and float32 C, row-major with
/// leading dimensions as gemm_tile's, on the calling thread: on AMX tiles (only where
/// amx_bf16_available()) or by VDPBF16PS (only where avx512_bf16_available()).
void gemm_bf16_amx(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta,
                   float* c, int64_t ldc);
void gemm_bf16_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta,
                      float* c, int64_t ldc);

/// C [m, n] = alpha · op(A) · op(B) + beta · C for row-major A, B, C with leading dimensions
/// lda, ldb, ldc (op(X) = Xᵀ when trans_x), on the calling thread alone, by the process's
/// backend: what a kernel that multiplies tiles of its own calls (tensor/cpu/attention.cc).
/// BLAS semantics: with beta 0, C is not read. T is float or double; sizes must fit the
/// 32-bit BLAS interface (the caller's tiles do).
template <class T>
void gemm_tile(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
               int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

}  // namespace pipewright::cpu
