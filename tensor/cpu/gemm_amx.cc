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
// The operands are packed as Note [bf16 GEMM blocks] (gemm_bf16.cc) says, so that every tile
// load reads 1 KiB in a row; each 32 × 32 block of C is four C tiles, fed by two A tiles and
// two B tiles (the eight tile registers), summed over K in 32-element steps.
//
// Measured (docs/BENCHMARKS.md, "A bf16 GEMM on this CPU", "bf16 GEMMs on AMX" and "AMX:
// tiles in a row"): oneDNN's AMX matmul ran 3.5–7.4× OpenBLAS's sgemm on the widened operands
// at the examples' and GPT-2 small's shapes; this kernel, the project's own (no 40 MB
// dependency), runs 1.3–2.3× the widened path at 8 rows, 2.7–3.9× from 32 rows on.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "tensor/cpu/gemm.h"
#include "tensor/cpu/gemm_bf16.h"
#include "tensor/half.h"

namespace pipewright::cpu {
namespace {

using bf16::kBlock;
using bf16::kHalf;

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

/// The 32 × 32 block of C from the packed operands: a bf16::BlockProduct (gemm_bf16.h), all
/// 32 rows and the whole kp (the tile unit multiplies whole tiles), stored to a buffer and
/// added into C from there. Every tile load reads 1 KiB that lies contiguous in memory.
__attribute__((target("amx-tile,amx-bf16"))) void block_product(const uint16_t* a_tiles,
                                                                 const uint16_t* b_pairs,
                                                                 int64_t /*k*/, int64_t kp,
                                                                 const bf16::BlockOutput& out) {
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
  alignas(64) float sums[kBlock * kBlock];
  constexpr int64_t kStride = kBlock * sizeof(float);
  _tile_stored(0, sums, kStride);
  _tile_stored(1, sums + kHalf, kStride);
  _tile_stored(2, sums + kHalf * kBlock, kStride);
  _tile_stored(3, sums + kHalf * kBlock + kHalf, kStride);
  bf16::add_block(sums, out);
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
  configure_tiles();
  bf16::gemm_blocks(block_product, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  release_tiles();
}

}  // namespace pipewright::cpu
