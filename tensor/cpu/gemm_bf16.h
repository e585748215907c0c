// The frame both native bfloat16 GEMM kernels share (Note [bf16 GEMM blocks], gemm_bf16.cc):
// packing op(A) and op(B) once, walking C in 32 × 32 blocks, adding each block into C with
// alpha and beta. A kernel supplies only the product of one block. Internal to tensor/cpu.
#pragma once

#include <cstdint>

#include "tensor/half.h"

namespace pipewright::cpu::bf16 {

inline constexpr int64_t kBlock = 32;  // rows and columns of C per block; K per step
inline constexpr int64_t kHalf = 16;   // rows of an A tile, columns of a B pair group

/// Where one block's result goes: C's rows × cols block (rows, cols 1 to 32) at `c` with
/// leading dimension ldc, to become alpha · (the block's sums) + beta · itself (not read when
/// beta is 0, BLAS semantics).
struct BlockOutput {
  float* c;
  int64_t ldc, rows, cols;
  float alpha, beta;
};

/// The 32 × 32 block of op(A) · op(B) from the packed operands, added into C as `out` says.
/// `a_tiles`: the block's two 16-row groups of op(A), one after the other (the second at
/// a_tiles + kp · 16), each kp/32 tiles of 16 rows × 32 values of K; `b_pairs`: its two
/// 16-column groups of op(B) (the second at b_pairs + kp · 16), each kp/2 pairs of K rows × 16
/// columns, a pair's two values side by side. k: the product's depth; kp: k rounded up to 32,
/// zeros past k. Every element must be summed over K in an order that depends on k alone
/// (never on the block's rows or columns).
using BlockProduct = void (*)(const uint16_t* a_tiles, const uint16_t* b_pairs, int64_t k,
                              int64_t kp, const BlockOutput& out);

/// out's block of C = alpha · sums + beta · itself, from the block's sums in a row-major
/// 32 × 32 buffer: the end of a kernel that cannot write C from its registers.
void add_block(const float* sums, const BlockOutput& out);

/// C [m, n] = alpha · op(A) · op(B) + beta · C for row-major bfloat16 A, B and float32 C with
/// leading dimensions lda, ldb, ldc (op(X) = Xᵀ when trans_x), on the calling thread, each
/// 32 × 32 block of C computed by `product`. BLAS semantics: with beta 0, C is not read.
/// Needs AVX-512BW (every CPU with AVX512-BF16 or AMX has it).
void gemm_blocks(BlockProduct product, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 float alpha, const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb,
                 float beta, float* c, int64_t ldc);

}  // namespace pipewright::cpu::bf16
