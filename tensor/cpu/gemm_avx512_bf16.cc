// The bfloat16 GEMM on AVX512-BF16 (Note [bf16 GEMM on AVX512-BF16]).
//
// Note [bf16 GEMM on AVX512-BF16]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// C [m, n] = alpha · op(A) op(B) + beta · C with bfloat16 A and B and float32 C, for CPUs
// with AVX512-BF16 but no AMX (Intel Cooper Lake, AMD Zen 4 and later). One VDPBF16PS takes,
// in each of its 16 float32 lanes, two bf16 products and adds them to the lane: lane j gets
// A[i][2p] · B[2p][j] + A[i][2p + 1] · B[2p + 1][j]. Each product of two bf16 values is exact
// in float32 and the sums are float32, as on AMX and in cuBLAS's GemmEx with
// CUBLAS_COMPUTE_32F; the instruction treats denormal inputs as zero and flushes denormal
// results (no value the precision policy makes from trained weights and activations is that
// small; tests/tensor/ops_matmul_test bounds the difference from float64).
//
// The operands are packed as for AMX (Note [bf16 GEMM blocks], gemm_bf16.cc): a 16-column
// pair row of op(B) is one register, and a pair of op(A)'s row is one 32-bit word, broadcast
// to all 16 lanes from memory. A 32 × 32 block of C is computed 8 rows at a time: 8 × 2
// registers of sums (16 of the 32), two of B, each pair of K a register load of B per 16
// columns and a broadcast of A per row, 16 VDPBF16PS. Sums run over the pairs of K in order,
// fixed by k alone (Note [bf16 GEMM blocks]). Unlike the tile unit it need not multiply whole
// tiles: a block passes only over the rows C needs (8 rows of a micro-batch cost a quarter of
// 32) and stops at the last pair that holds values (a weight gradient over 8 rows is 4 pairs
// deep, not 16).
//
// Why: one VDPBF16PS does 32 multiply-adds where an FMA does 16, at the same rate (one 512-bit
// instruction a cycle on this project's AMD EPYC), and before this kernel a bf16 product was
// widened to float32 and ran a little slower than float32's. Measured (docs/BENCHMARKS.md,
// "bf16 GEMMs on AVX512-BF16"): 1024³ at 212 GFLOP/s on one core against sgemm's 99, 1.9–2.3×
// sgemm from 32 rows on; the char GPT's bf16 step 1.3–1.5× its float32 one.
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "tensor/cpu/gemm.h"
#include "tensor/cpu/gemm_bf16.h"
#include "tensor/half.h"

namespace pipewright::cpu {
namespace {

using bf16::kBlock;
using bf16::kHalf;

/// The rows of C one pass of block_product sums (8 × 2 registers).
constexpr int64_t kRows = 8;

/// XCR0: the OS saves and restores SSE, AVX and the three AVX-512 states (opmask, the upper
/// halves of ZMM0-15, ZMM16-31).
bool os_saves_avx512_state() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  constexpr unsigned kOsXsave = 1u << 27;
  if ((ecx & kOsXsave) == 0) return false;
  unsigned low = 0, high = 0;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  constexpr unsigned kStates = 0b1110'0110;  // bits 1, 2 and 5, 6, 7
  return (low & kStates) == kStates;
}

/// CPUID says AVX-512F, AVX-512BW (pack_pairs) and AVX512-BF16, and the OS keeps their state.
bool detect_avx512_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  constexpr unsigned kAvx512F = 1u << 16, kAvx512Bw = 1u << 30;
  if ((ebx & kAvx512F) == 0 || (ebx & kAvx512Bw) == 0) return false;
  if (eax < 1) return false;  // no subleaf 1
  unsigned eax1 = 0, ebx1 = 0, ecx1 = 0, edx1 = 0;
  __get_cpuid_count(7, 1, &eax1, &ebx1, &ecx1, &edx1);
  constexpr unsigned kAvx512Bf16 = 1u << 5;
  return (eax1 & kAvx512Bf16) != 0 && os_saves_avx512_state();
}

/// The 32 × 32 block of C from the packed operands: a bf16::BlockProduct (gemm_bf16.h), 8
/// rows at a time, as many as C needs, over the pairs of K that hold values (the zero pairs
/// past k add nothing), added into C from the registers (masked past the block's columns).
__attribute__((target("avx512f,avx512bf16"))) void block_product(const uint16_t* a_tiles,
                                                                 const uint16_t* b_pairs,
                                                                 int64_t k, int64_t kp,
                                                                 const bf16::BlockOutput& out) {
  const uint16_t* b_right = b_pairs + kp * kHalf;  // columns 16 .. 31
  const int64_t pairs = (k + 1) / 2;
  // The columns of each half that C takes.
  const auto columns = [](int64_t n) {
    return static_cast<__mmask16>(n >= kHalf ? 0xffff : n <= 0 ? 0 : (1u << n) - 1);
  };
  const __mmask16 left_mask = columns(out.cols), right_mask = columns(out.cols - kHalf);
  const __m512 alpha = _mm512_set1_ps(out.alpha), beta = _mm512_set1_ps(out.beta);
  for (int64_t r0 = 0; r0 < out.rows; r0 += kRows) {
    // Rows r0 .. r0 + 7: in the 16-row group r0 / 16, from its row r0 % 16 on.
    const uint16_t* a_rows = a_tiles + (r0 / kHalf) * kp * kHalf + (r0 % kHalf) * kBlock;
    __m512 left[kRows], right[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) left[r] = right[r] = _mm512_setzero_ps();
    for (int64_t kb = 0; kb < kp; kb += kBlock) {  // one 16 × 32 tile of A per 16 pairs
      const uint16_t* a_tile = a_rows + kb * kHalf;
      const uint16_t* b0 = b_pairs + kb * kHalf;
      const uint16_t* b1 = b_right + kb * kHalf;
      const int64_t tile_pairs = std::min(kHalf, pairs - kb / 2);
      for (int64_t q = 0; q < tile_pairs; ++q) {  // pair kb / 2 + q
        const __m512bh b_left = (__m512bh)_mm512_loadu_si512(b0 + q * kBlock);
        const __m512bh b_right_pair = (__m512bh)_mm512_loadu_si512(b1 + q * kBlock);
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) {
          int32_t pair;  // A[row][2p], A[row][2p + 1]
          std::memcpy(&pair, a_tile + r * kBlock + 2 * q, sizeof(pair));
          const __m512bh a_pair = (__m512bh)_mm512_set1_epi32(pair);
          left[r] = _mm512_dpbf16_ps(left[r], a_pair, b_left);
          right[r] = _mm512_dpbf16_ps(right[r], a_pair, b_right_pair);
        }
      }
    }
    // Constant indices only (an index the compiler cannot unroll would put the sums in memory).
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      if (r0 + r >= out.rows) break;
      float* c_row = out.c + (r0 + r) * out.ldc;
      __m512 lo = _mm512_mul_ps(alpha, left[r]), hi = _mm512_mul_ps(alpha, right[r]);
      if (out.beta != 0.0f) {  // BLAS semantics: with beta 0, C is not read
        lo = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(left_mask, c_row), lo);
        hi = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(right_mask, c_row + kHalf), hi);
      }
      _mm512_mask_storeu_ps(c_row, left_mask, lo);
      _mm512_mask_storeu_ps(c_row + kHalf, right_mask, hi);
    }
  }
}

}  // namespace

bool avx512_bf16_available() {
  static const bool available = detect_avx512_bf16();
  return available;
}

void gemm_bf16_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta,
                      float* c, int64_t ldc) {
  bf16::gemm_blocks(block_product, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace pipewright::cpu
