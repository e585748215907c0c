// The bfloat16 GEMM on Intel AMX tiles (Note [bf16 GEMM on AMX]).
//
// Note [bf16 GEMM on AMX]
// ~~~~~~~~~~~~~~~~~~~~~~~
// C [m, n] = alpha · op(A) op(B) + beta · C with bfloat16 A and B and float32 C, on the CPU's
// tile unit (Intel AMX-BF16: Sapphire Rapids and later). One TDPBF16PS multiplies a 16 × 32
// bf16 tile of A by a 32 × 16 tile of B into a 16 × 16 float32 tile of C: every product of two
// bf16 values is exact in float32 and the sums are float32, as in cuBLAS's GemmEx with
// CUBLAS_COMPUTE_32F, with two differences the hardware imposes: denormal inputs count as zero
// and denormal sums flush to zero (no value the precision policy produces from trained weights
// and activations is that small, and tests/tensor/ops_matmul_test bounds the difference from
// float64).
//
// The kernel packs op(A) into 16 × 32 tiles, K rounded up to 32 (zeros past k and past m), and
// op(B) into the tile unit's pair layout (for each 16 columns, each pair of K rows interleaved:
// B[2p][j], B[2p + 1][j]), so that every tile load reads 1 KiB in a row, then computes C in
// 32 × 32 blocks with four C tiles, two A tiles and two B tiles (the eight tile registers), and
// adds each block into C with alpha and beta.
// Every element of C is summed over K in the same 32-element steps whatever m and n are, so a
// micro-batch's rows get the bits the whole batch's would (pipelined and plain steps agree).
//
// op(B) = Bᵀ (a Linear's forward, x · Wᵀ) packs 16 × 16 squares of bf16 pairs with an AVX-512
// register transpose; op(A) = Aᵀ (a weight gradient) one tile column at a time.
//
// Measured (docs/BENCHMARKS.md, "A bf16 GEMM on this CPU", "bf16 GEMMs on AMX" and "AMX:
// tiles in a row"): oneDNN's AMX matmul ran 3.5–7.4× OpenBLAS's sgemm on the widened operands
// at the examples' and GPT-2 small's shapes; this kernel, the project's own (no 40 MB
// dependency), runs 1.3–2.3× the widened path at 8 rows, 2.7–3.9× from 32 rows on.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/cpu/gemm.h"
#include "tensor/half.h"

namespace pipewright::cpu {
namespace {

constexpr int64_t kBlock = 32;  // rows and columns of C per block; K per step
constexpr int64_t kHalf = 16;   // rows of an A or C tile, columns of a B or C tile

/// The tile unit's configuration (palette 1): 8 tiles of 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

/// CPUID says AMX-TILE and AMX-BF16, and Linux grants the process the tile data state
/// (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, needed since Linux 5.16).
bool request_amx() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  constexpr unsigned kAmxBf16 = 1u << 22, kAmxTile = 1u << 24;
  if ((edx & kAmxBf16) == 0 || (edx & kAmxTile) == 0) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

/// The 32 × 32 block of C from the packed operands, into `out` (row-major, 32 floats a row).
/// `a_tiles`: the block's two 16-row groups of op(A), each kp/32 tiles of 16 × 32 (pack_rows);
/// `b_pairs`: its two 16-column groups of op(B), each kp/2 pairs of rows × 16 (pack_pairs).
/// Every tile load reads 1 KiB that lies contiguous in memory.
__attribute__((target("amx-tile,amx-bf16"))) void block_product(const uint16_t* a_tiles,
                                                                 const uint16_t* b_pairs,
                                                                 int64_t kp, float* out) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const uint16_t* a_lower = a_tiles + kp * kHalf;  // the next 16 rows' tiles
  const uint16_t* b_right = b_pairs + kp * kHalf;  // the next 16 columns' pairs
  for (int64_t kb = 0; kb < kp; kb += kBlock) {
    _tile_loadd(4, a_tiles + kb * kHalf, 64);  // 16 rows × 32 values × 2 bytes
    _tile_loadd(5, a_lower + kb * kHalf, 64);
    _tile_loadd(6, b_pairs + kb * kHalf, 64);  // 16 pairs of rows × 16 columns × 2
    _tile_loadd(7, b_right + kb * kHalf, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  constexpr int64_t kStride = kBlock * sizeof(float);
  _tile_stored(0, out, kStride);
  _tile_stored(1, out + kHalf, kStride);
  _tile_stored(2, out + kHalf * kBlock, kStride);
  _tile_stored(3, out + kHalf * kBlock + kHalf, kStride);
}

/// Rows [0, rows) of op(A) (A row-major with leading dimension lda; op(A) = Aᵀ when trans)
/// into `out` as tiles: row i, element x at out[((i / 16) · kp/32 + x / 32) · 512 + (i % 16) · 32
/// + x % 32], i.e. each 16 rows one after another in 16 × 32 tiles along K (zeros past k
/// already there). Loops run along memory.
void pack_rows(bool trans, int64_t rows, int64_t k, int64_t kp, const uint16_t* a, int64_t lda,
               uint16_t* out) {
  const auto at = [kp](int64_t i, int64_t x) {
    return (i / kHalf) * kHalf * kp + (x / kBlock) * kHalf * kBlock + (i % kHalf) * kBlock + x % kBlock;
  };
  if (!trans) {
    for (int64_t i = 0; i < rows; ++i) {
      int64_t x = 0;
      for (; x + kBlock <= k; x += kBlock) std::memcpy(out + at(i, x), a + i * lda + x, kBlock * 2);
      if (x < k) std::memcpy(out + at(i, x), a + i * lda + x, (k - x) * 2);
    }
    return;
  }
  for (int64_t x = 0; x < k; ++x) {
    const uint16_t* column = a + x * lda;  // row x of A: element i is op(A)[i][x]
    uint16_t* dst = out + at(0, x);
    for (int64_t i0 = 0; i0 < rows; i0 += kHalf) {  // 16 rows: one tile's column x % 32
      uint16_t* tile = dst + i0 * kp;
      const int64_t end = std::min(kHalf, rows - i0);
      for (int64_t r = 0; r < end; ++r) tile[r * kBlock] = column[i0 + r];
    }
  }
}

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

/// Columns [0, cols) of op(B) in the tile unit's pair layout: column j, rows 2p and 2p + 1 at
/// out[((j / 16) · kp/2 + p) · 32 + (j % 16) · 2 + 0 / 1] (zeros past k already there). Every
/// CPU with AMX has AVX-512BW, which interleaves two rows of B 16 columns at a time.
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
  // Rows 2p and 2p + 1 of B, 16 columns: lane 2c takes row 2p's column c, lane 2c + 1 row
  // 2p + 1's (the second operand's elements are numbered from 32).
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  const int64_t whole = cols / kHalf * kHalf;
  for (int64_t p = 0; 2 * p < k; ++p) {
    const uint16_t* even = b + 2 * p * ldb;
    const uint16_t* odd = 2 * p + 1 < k ? even + ldb : nullptr;
    uint16_t* dst = out + p * kBlock;
    for (int64_t j = 0; j < whole; j += kHalf) {
      const __m512i e = _mm512_castsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(even + j)));
      const __m512i o = odd != nullptr ? _mm512_castsi256_si512(_mm256_loadu_si256(
                                             reinterpret_cast<const __m256i*>(odd + j)))
                                       : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + (j / kHalf) * group, _mm512_permutex2var_epi16(e, interleave, o));
    }
    for (int64_t j = whole; j < cols; ++j) {  // the last, partial 16 columns
      uint16_t* pair = dst + (j / kHalf) * group + (j % kHalf) * 2;
      pair[0] = even[j];
      pair[1] = odd != nullptr ? odd[j] : 0;
    }
  }
}

__attribute__((target("amx-tile,amx-bf16"))) void configure_tiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = kHalf;
    config.colsb[t] = 64;
  }
  _tile_loadconfig(&config);
}

__attribute__((target("amx-tile,amx-bf16"))) void release_tiles() { _tile_release(); }

}  // namespace

bool amx_bf16_available() {
  static const bool available = request_amx();
  return available;
}

void gemm_bf16_amx(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta,
                   float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const int64_t kp = round_up(std::max<int64_t>(k, 1), kBlock);
  // Rows of A and columns of B packed at a time: about kPackedElements each (2 MiB of bf16, a
  // core's L2), in whole blocks, so a large product (a language model's head) packs in pieces.
  constexpr int64_t kPackedElements = int64_t{1} << 20;
  const int64_t chunk = std::max<int64_t>(kBlock, kPackedElements / kp / kBlock * kBlock);
  // Packed operands, reused by the thread's later calls.
  thread_local std::vector<uint16_t> a_rows, b_pairs;
  alignas(64) float block[kBlock * kBlock];
  configure_tiles();
  for (int64_t i_chunk = 0; i_chunk < m; i_chunk += chunk) {
    const int64_t mc = std::min(chunk, m - i_chunk);
    a_rows.assign(static_cast<size_t>(round_up(mc, kBlock) * kp), 0);
    pack_rows(trans_a, mc, k, kp, reinterpret_cast<const uint16_t*>(a) +
                                      (trans_a ? i_chunk : i_chunk * lda), lda, a_rows.data());
    for (int64_t j_chunk = 0; j_chunk < n; j_chunk += chunk) {
      const int64_t nc = std::min(chunk, n - j_chunk);
      b_pairs.assign(static_cast<size_t>(round_up(nc, kBlock) * kp), 0);
      pack_pairs(trans_b, nc, k, kp, reinterpret_cast<const uint16_t*>(b) +
                                        (trans_b ? j_chunk * ldb : j_chunk), ldb, b_pairs.data());
      for (int64_t i0 = 0; i0 < mc; i0 += kBlock) {
        for (int64_t j0 = 0; j0 < nc; j0 += kBlock) {
          block_product(a_rows.data() + i0 * kp, b_pairs.data() + j0 * kp, kp, block);
          const int64_t rows = std::min(kBlock, mc - i0), cols = std::min(kBlock, nc - j0);
          for (int64_t r = 0; r < rows; ++r) {
            float* c_row = c + (i_chunk + i0 + r) * ldc + j_chunk + j0;
            const float* p = block + r * kBlock;
            if (beta == 0.0f) {  // BLAS semantics: C is not read
              for (int64_t q = 0; q < cols; ++q) c_row[q] = alpha * p[q];
            } else {
              for (int64_t q = 0; q < cols; ++q) c_row[q] = alpha * p[q] + beta * c_row[q];
            }
          }
        }
      }
    }
  }
  release_tiles();
}

}  // namespace pipewright::cpu
