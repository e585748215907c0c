// The CUDA kernels: one function per entry of PIPEWRIGHT_KERNELS (tensor/kernels.h, Note [One
// kernel list]), declared here from that list; cuda_kernels/register.cc puts them in
// DeviceType::kCUDA's table. The CPU-only kernels (PIPEWRIGHT_CPU_ONLY_KERNELS) have no CUDA
// version: their entries stay null and ops.cc runs the unfused ops instead.
//
// Where each is defined:
//   elementwise.cu    fill (also int64), binary, binary_scalar, unary, relu_backward, axpy
//   copy.cu           copy_strided, cast (any dtype: copies move bytes; cast converts)
//   reduce.cu         reduce, norm_share_add, argmax
//   gemm.cc           gemm (cuBLAS), gemm_bias (cuBLASLt)
//   softmax.cu        softmax, softmax_backward
//   cross_entropy.cu  cross_entropy, cross_entropy_backward
//   batch_norm.cu     batch_norm_train, batch_norm_eval, batch_norm_backward
//   batch_norm_running.cu  batch_norm_accumulate, batch_norm_commit
//   random.cu         philox_uniform, philox_normal, dropout, dropout_indirect (bit-identical
//                     to the CPU: philox.h)
//   index_select.cu   index_select (src of any dtype)
//   optim.cu          sgd_step, sgd_step_indirect, adam_step, adam_step_indirect,
//                     sgd_step_multi, adam_step_multi
//   gemm.cc           gemm_batched (cuBLAS strided-batched)
//   attention.cu      flash_attention, flash_attention_backward (also bfloat16 / float16
//                     inputs, float32 results; head dim <= 256); 16-bit inputs with head
//                     dim <= 128 on tensor cores (attention_mma.cu)
//   masking.cu        masked_fill (also int64), triangular (also int64), causal_softmax,
//                     causal_softmax_backward
//   index_add.cu      index_add (waits for its stream to check its indices)
//   gelu.cu           gelu, gelu_backward (erf is a unary op of elementwise.cu)
//   layer_norm.cu     layer_norm, layer_norm_backward
//
// Every kernel may assume what kernels.h promises (contiguous tensors on one CUDA device,
// shapes checked, outputs allocated). Work is queued on the calling thread's current stream
// of that device and is asynchronous: results are ready for later work on the same stream,
// and for the host after a synchronize or a copy to the CPU. Exceptions: cross_entropy,
// cross_entropy_backward, index_select and index_add wait for their stream to check their
// indices.
// Dtypes: float32 and float64, like the CPU kernels; int64 too where a comment says so.
// Anything else throws std::invalid_argument naming the op and the dtype.
#pragma once

#include <cstdint>

#include "tensor/kernels.h"

namespace pipewright::cuda {

/// The CUDA table: every entry of PIPEWRIGHT_KERNELS filled; the CPU-only kernels null.
const Kernels& kernel_table();

#define PIPEWRIGHT_DECLARE_KERNEL(name, params) void name params;
PIPEWRIGHT_KERNELS(PIPEWRIGHT_DECLARE_KERNEL)
#undef PIPEWRIGHT_DECLARE_KERNEL

}  // namespace pipewright::cuda
