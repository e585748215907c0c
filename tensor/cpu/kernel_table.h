// The CPU kernels (OpenBLAS GEMM, loops + OpenMP elsewhere): one function per entry of
// PIPEWRIGHT_KERNELS and PIPEWRIGHT_CPU_ONLY_KERNELS (tensor/kernels.h, Note [One kernel
// list]), declared here from that list, so name and signature are written once. Every kernel
// may assume what kernels.h promises: contiguous tensors on one CPU device, shapes checked,
// outputs allocated.
//
// Where each is defined:
//   elementwise.cc  fill, copy_strided, cast, binary, binary_scalar, unary, relu_backward, axpy,
//                   index_select
//   reduce.cc       reduce, norm_share_add, argmax
//   gemm.cc         gemm, gemm_batched, gemm_bias
//   softmax.cc      softmax, softmax_backward
//   loss.cc         cross_entropy, cross_entropy_backward
//   batch_norm.cc   batch_norm_train, batch_norm_eval, batch_norm_backward,
//                   batch_norm_accumulate, batch_norm_commit
//   random.cc       philox_uniform, philox_normal, dropout, dropout_indirect
//   optim.cc        sgd_step, sgd_step_indirect, adam_step, adam_step_indirect,
//                   sgd_step_multi, adam_step_multi
//   masking.cc      masked_fill, triangular, causal_softmax, causal_softmax_backward
//   index_add.cc    index_add
//   gelu.cc         gelu, gelu_backward (erf is a unary op of elementwise.cc)
//   layer_norm.cc   layer_norm, layer_norm_backward
//   attention.cc    flash_attention, flash_attention_backward
#pragma once

#include <cstdint>

#include "tensor/kernels.h"

namespace pipewright::cpu {

/// The CPU table, with every entry filled.
const Kernels& kernel_table();

#define PIPEWRIGHT_DECLARE_KERNEL(name, params) void name params;
PIPEWRIGHT_KERNELS(PIPEWRIGHT_DECLARE_KERNEL)
PIPEWRIGHT_CPU_ONLY_KERNELS(PIPEWRIGHT_DECLARE_KERNEL)
#undef PIPEWRIGHT_DECLARE_KERNEL

}  // namespace pipewright::cpu
