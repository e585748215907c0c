#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {

namespace {
Kernels make_table() {
  Kernels k;
  k.fill = &fill;
  k.copy_strided = &copy_strided;
  k.cast = &cast;
  k.binary = &binary;
  k.binary_scalar = &binary_scalar;
  k.unary = &unary;
  k.relu_backward = &relu_backward;
  k.axpy = &axpy;
  k.reduce = &reduce;
  k.argmax = &argmax;
  k.gemm = &gemm;
  k.softmax = &softmax;
  k.softmax_backward = &softmax_backward;
  k.cross_entropy = &cross_entropy;
  k.cross_entropy_backward = &cross_entropy_backward;
  k.batch_norm_train = &batch_norm_train;
  k.batch_norm_eval = &batch_norm_eval;
  k.batch_norm_backward = &batch_norm_backward;
  k.philox_uniform = &philox_uniform;
  k.philox_normal = &philox_normal;
  k.dropout = &dropout;
  k.index_select = &index_select;
  k.sgd_step = &sgd_step;
  k.adam_step = &adam_step;
  return k;
}
}  // namespace

const Kernels& kernel_table() {
  static const Kernels table = make_table();
  return table;
}

}  // namespace pipewright::cpu
