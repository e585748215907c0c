// The frame of the native bfloat16 GEMMs (Note [bf16 GEMM blocks]).
//
// Note [bf16 GEMM blocks]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Both kernels of our own for bfloat16 × bfloat16 → float32 products, the AMX tile one (Note
// [bf16 GEMM on AMX], gemm_amx.cc) and the AVX512-BF16 one (Note [bf16 GEMM on AVX512-BF16],
// gemm_avx512_bf16.cc), multiply pairs of K values: TDPBF16PS and VDPBF16PS both take A's
// (A[i][2p], A[i][2p + 1]) and B's (B[2p][j], B[2p + 1][j]) side by side. So both read the same
// packed operands and differ only in how they multiply one 32 × 32 block of C (BlockProduct,
// gemm_bf16.h):
// - op(A) packed into 16 × 32 tiles, K rounded up to 32 (zeros past k): each 16 rows of op(A)
//   one after another as kp/32 tiles, a tile's row the 32 K values of one row (pack_rows);
// - op(B) packed into the pair layout: for each 16 columns, each pair of K rows interleaved,
//   B[2p][j], B[2p + 1][j] (pack_pairs), so that a 16-column pair row is 64 bytes in a row (a
//   tile row or one AVX-512 register).
// op(B) = Bᵀ (a Linear's forward, x · Wᵀ) packs 16 × 16 squares of bf16 pairs with an AVX-512
// register transpose; op(A) = Aᵀ (a weight gradient, gyᵀ · x) interleaves pairs of A's rows
// into such squares and transposes them the same way.
// gemm_blocks packs rows of A and columns of B about 2^20 elements at a time (a language
// model's head packs in pieces) and has the kernel compute C in 32 × 32 blocks, each added
// into C with alpha and beta (from registers, or from a buffer by add_block). The buffers are
// reused and never cleared whole: only K's padding must be zero (the kernels multiply whole
// pairs, or whole tiles), so zero_k_padding clears each 16-row group's last K block before
// packing; rows of A or columns of B past the operand's in the last group keep old values,
// which reach only sums that are never stored. Every element of
// C is summed over K in an order fixed by K alone, whatever m and n are, so a micro-batch's
// rows get the bits the whole batch's would (pipelined and plain steps agree;
// tests/tensor/ops_matmul_test checks it for every kernel).
#include "tensor/cpu/gemm_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace pipewright::cpu::bf16 {
namespace {

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// GCC 12's AVX-512 shuffles start from _mm512_undefined_epi32(), a self-initialised value
// that -Wuninitialized and -Wmaybe-uninitialized report once the shuffles are inlined (a false
// positive: every lane is written). Silenced for the packing functions, which inline them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
/// 16 rows of B (leading dimension ldb, from `rows`), 16 pairs of values each, as 16 × 16
/// 32-bit words transposed into `out` (16 words a pair index): out[c · 16 + i] = pair c of row
/// i. Three rounds of AVX-512 unpacks and lane shuffles (32-bit, 64-bit, then 128-bit lanes
/// twice), the textbook 16 × 16 transpose.
__attribute__((target("avx512f"))) void transpose_pairs(const uint16_t* rows, int64_t ldb, uint32_t* out) {
  __m512i r[16], t[16], u[16], v[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(rows + i * ldb);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[g + a]: rows g .. g + 3 of column 4L + a in each 128-bit lane L.
  for (int g = 0; g < 16; g += 4) {
    u[g + 0] = _mm512_unpacklo_epi64(t[g + 0], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g + 0], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  // v[h + a] (h = 0, 8): columns a and 8 + a of rows h .. h + 7; v[h + 4 + a]: 4 + a, 12 + a.
  for (int h = 0; h < 16; h += 8) {
    for (int a = 0; a < 4; ++a) {
      v[h + a] = _mm512_shuffle_i32x4(u[h + a], u[h + 4 + a], 0x88);
      v[h + 4 + a] = _mm512_shuffle_i32x4(u[h + a], u[h + 4 + a], 0xdd);
    }
  }
  for (int c = 0; c < 8; ++c) {  // c = a or 4 + a: columns c and 8 + c of all 16 rows
    _mm512_storeu_si512(out + c * 16, _mm512_shuffle_i32x4(v[c], v[8 + c], 0x88));
    _mm512_storeu_si512(out + (c + 8) * 16, _mm512_shuffle_i32x4(v[c], v[8 + c], 0xdd));
  }
}

/// 16 values from `even` and 16 from `odd` (zeros when null) as 16 pairs, one 32-bit word
/// each: lane 2c takes even[c], lane 2c + 1 odd[c].
__attribute__((target("avx512f,avx512bw"))) __m512i interleave(const uint16_t* even,
                                                               const uint16_t* odd) {
  // The second operand's elements are numbered from 32.
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i e =
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(even)));
  const __m512i o = odd != nullptr ? _mm512_castsi256_si512(_mm256_loadu_si256(
                                         reinterpret_cast<const __m256i*>(odd)))
                                   : _mm512_setzero_si512();
  return _mm512_permutex2var_epi16(e, _mm512_load_si512(kInterleave), o);
}

/// Columns [0, cols) of op(B) in the pair layout: column j, rows 2p and 2p + 1 at
/// out[((j / 16) · kp/2 + p) · 32 + (j % 16) · 2 + 0 / 1] (zeros past k already there). Every
/// CPU with AMX or AVX512-BF16 has AVX-512BW, which interleaves two rows of B 16 columns at a
/// time.
__attribute__((target("avx512f,avx512bw"))) void pack_pairs(bool trans, int64_t cols,
                                                             int64_t k, int64_t kp,
                                                             const uint16_t* b, int64_t ldb,
                                                             uint16_t* out) {
  const int64_t group = kp * kHalf;  // elements per 16 columns
  if (trans) {  // column j of op(B) is row j of B: each pair is one 32-bit word there
    // Whole 16 × 16 squares of pairs (16 columns, 32 values of K) by a register transpose,
    // the rest (the last columns, K's tail) one pair at a time.
    const int64_t whole_cols = cols / kHalf * kHalf, whole_pairs = k / kBlock * kHalf;
    for (int64_t j = 0; j < whole_cols; j += kHalf) {
      uint32_t* dst = reinterpret_cast<uint32_t*>(out + (j / kHalf) * group);
      for (int64_t p = 0; p < whole_pairs; p += kHalf) {
        transpose_pairs(b + j * ldb + 2 * p, ldb, dst + p * kHalf);
      }
    }
    for (int64_t j = 0; j < cols; ++j) {
      const uint16_t* row = b + j * ldb;
      uint32_t* dst = reinterpret_cast<uint32_t*>(out + (j / kHalf) * group) + j % kHalf;
      int64_t p = j < whole_cols ? whole_pairs : 0;
      for (; 2 * p + 1 < k; ++p) {
        uint32_t pair;
        std::memcpy(&pair, row + 2 * p, sizeof(pair));
        dst[p * kHalf] = pair;
      }
      if (2 * p < k) dst[p * kHalf] = row[2 * p];  // odd k: the last pair's second is 0
    }
    return;
  }
  const int64_t whole = cols / kHalf * kHalf;
  for (int64_t p = 0; 2 * p < k; ++p) {
    const uint16_t* even = b + 2 * p * ldb;
    const uint16_t* odd = 2 * p + 1 < k ? even + ldb : nullptr;
    uint16_t* dst = out + p * kBlock;
    for (int64_t j = 0; j < whole; j += kHalf) {
      _mm512_storeu_si512(dst + (j / kHalf) * group,
                          interleave(even + j, odd != nullptr ? odd + j : nullptr));
    }
    for (int64_t j = whole; j < cols; ++j) {  // the last, partial 16 columns
      uint16_t* pair = dst + (j / kHalf) * group + (j % kHalf) * 2;
      pair[0] = even[j];
      pair[1] = odd != nullptr ? odd[j] : 0;
    }
  }
}

/// Rows [0, rows) of op(A) (A row-major with leading dimension lda; op(A) = Aᵀ when trans)
/// into `out` as tiles: row i, element x at out[((i / 16) · kp/32 + x / 32) · 512 + (i % 16) · 32
/// + x % 32], i.e. each 16 rows one after another in 16 × 32 tiles along K (zeros past k
/// already there).
/// op(A) = A copies rows along memory. op(A) = Aᵀ (a weight gradient, gyᵀ · x) makes each
/// whole tile, 16 columns of A by 32 of its rows, by interleaving 16 pairs of A's rows into
/// a square of 16 × 16 pairs and transposing it as pack_pairs does; the tiles that run past
/// rows or k, one value at a time.
__attribute__((target("avx512f,avx512bw"))) void pack_rows(bool trans, int64_t rows, int64_t k,
                                                            int64_t kp, const uint16_t* a,
                                                            int64_t lda, uint16_t* out) {
  const auto at = [kp](int64_t i, int64_t x) {
    return (i / kHalf) * kHalf * kp + (x / kBlock) * kHalf * kBlock + (i % kHalf) * kBlock +
           x % kBlock;
  };
  if (!trans) {
    for (int64_t i = 0; i < rows; ++i) {
      int64_t x = 0;
      for (; x + kBlock <= k; x += kBlock) std::memcpy(out + at(i, x), a + i * lda + x, kBlock * 2);
      if (x < k) std::memcpy(out + at(i, x), a + i * lda + x, (k - x) * 2);
    }
    return;
  }
  const int64_t whole_rows = rows / kHalf * kHalf, whole_k = k / kBlock * kBlock;
  alignas(64) uint16_t square[kHalf * kBlock];  // pair q of 16 columns at square[q · 32]
  for (int64_t i0 = 0; i0 < whole_rows; i0 += kHalf) {
    for (int64_t x0 = 0; x0 < whole_k; x0 += kBlock) {
      for (int64_t q = 0; q < kHalf; ++q) {
        const uint16_t* even = a + (x0 + 2 * q) * lda + i0;
        _mm512_storeu_si512(square + q * kBlock, interleave(even, even + lda));
      }
      transpose_pairs(square, kBlock, reinterpret_cast<uint32_t*>(out + at(i0, x0)));
    }
  }
  for (int64_t x = 0; x < k; ++x) {  // the rest: rows past whole_rows, or K past whole_k
    const uint16_t* row = a + x * lda;  // row x of A: element i is op(A)[i][x]
    for (int64_t i = x < whole_k ? whole_rows : 0; i < rows; ++i) out[at(i, x)] = row[i];
  }
}

#pragma GCC diagnostic pop

/// Zeros K's padding [k, kp) in a buffer of `groups` 16-row (or 16-column) groups, either
/// layout: a group is kp · 16 values, its K blocks 512 values each one after another.
void zero_k_padding(uint16_t* packed, int64_t groups, int64_t k, int64_t kp) {
  if (k == kp) return;
  const int64_t group = kp * kHalf, last_block = (kp / kBlock - 1) * kHalf * kBlock;
  for (int64_t g = 0; g < groups; ++g) {
    std::memset(packed + g * group + last_block, 0, kHalf * kBlock * sizeof(uint16_t));
  }
}

}  // namespace

void gemm_blocks(BlockProduct product, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 float alpha, const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb,
                 float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const int64_t kp = round_up(std::max<int64_t>(k, 1), kBlock);
  // Rows of A and columns of B packed at a time: about kPackedElements each (2 MiB of bf16, a
  // core's L2), in whole blocks, so a large product (a language model's head) packs in pieces.
  constexpr int64_t kPackedElements = int64_t{1} << 20;
  const int64_t chunk = std::max<int64_t>(kBlock, kPackedElements / kp / kBlock * kBlock);
  // Packed operands, reused by the thread's later calls.
  thread_local std::vector<uint16_t> a_rows, b_pairs;
  for (int64_t i_chunk = 0; i_chunk < m; i_chunk += chunk) {
    const int64_t mc = std::min(chunk, m - i_chunk);
    a_rows.resize(static_cast<size_t>(round_up(mc, kBlock) * kp));
    zero_k_padding(a_rows.data(), round_up(mc, kHalf) / kHalf, k, kp);
    pack_rows(trans_a, mc, k, kp, reinterpret_cast<const uint16_t*>(a) +
                                      (trans_a ? i_chunk : i_chunk * lda), lda, a_rows.data());
    for (int64_t j_chunk = 0; j_chunk < n; j_chunk += chunk) {
      const int64_t nc = std::min(chunk, n - j_chunk);
      b_pairs.resize(static_cast<size_t>(round_up(nc, kBlock) * kp));
      zero_k_padding(b_pairs.data(), round_up(nc, kHalf) / kHalf, k, kp);
      pack_pairs(trans_b, nc, k, kp, reinterpret_cast<const uint16_t*>(b) +
                                        (trans_b ? j_chunk * ldb : j_chunk), ldb, b_pairs.data());
      for (int64_t i0 = 0; i0 < mc; i0 += kBlock) {
        for (int64_t j0 = 0; j0 < nc; j0 += kBlock) {
          const BlockOutput out{.c = c + (i_chunk + i0) * ldc + j_chunk + j0,
                                .ldc = ldc,
                                .rows = std::min(kBlock, mc - i0),
                                .cols = std::min(kBlock, nc - j0),
                                .alpha = alpha,
                                .beta = beta};
          product(a_rows.data() + i0 * kp, b_pairs.data() + j0 * kp, k, kp, out);
        }
      }
    }
  }
}

void add_block(const float* sums, const BlockOutput& out) {
  for (int64_t r = 0; r < out.rows; ++r) {
    float* c_row = out.c + r * out.ldc;
    const float* p = sums + r * kBlock;
    if (out.beta == 0.0f) {  // BLAS semantics: C is not read
      for (int64_t q = 0; q < out.cols; ++q) c_row[q] = out.alpha * p[q];
    } else {
      for (int64_t q = 0; q < out.cols; ++q) c_row[q] = out.alpha * p[q] + out.beta * c_row[q];
    }
  }
}

}  // namespace pipewright::cpu::bf16
