// Batched matrix products with broadcasting of the leading dims (torch.matmul on operands of
// rank >= 2). Not differentiable: see autograd/batched_matmul.h.
#pragma once

#include "tensor/tensor.h"

namespace pipewright::ops {

/// torch.matmul(op(a), op(b)) for a and b of rank >= 2, op(x) = x with its last two dims
/// swapped when its flag is set (read in place by the GEMM, never copied):
///   op(a) [..., M, K] · op(b) [..., K, N] -> [..., M, N]
/// The leading dims broadcast by torch's rules (aligned from the right; each pair equal or one
/// of them 1; a missing dim counts as 1): a [B, H, T, D] · b [D, E] multiplies every matrix of a
/// by the one b. An operand whose leading dims are all 1 is shared without a copy (a stride-0
/// batch), one whose leading dims equal the result's is used as it is, any other broadcast
/// is materialised. Float32 / float64, or two bfloat16 / float16 operands giving float32 (as
/// ops::matmul), one device; the CPU runs each product through the GEMM
/// backend (OpenBLAS), CUDA through cuBLAS's strided-batched GEMM.
/// Throws std::invalid_argument naming both shapes and flags when an operand has rank < 2,
/// the inner sizes differ or the leading dims do not broadcast; and as ops::matmul for
/// mismatched dtypes or devices.
Tensor batched_matmul(const Tensor& a, const Tensor& b, bool trans_a = false,
                      bool trans_b = false);

/// The broadcast of two shapes by torch's rules (aligned from the right; equal or 1).
/// Throws std::invalid_argument naming both when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace pipewright::ops
