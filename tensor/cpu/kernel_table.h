// The CPU kernels (Eigen + OpenMP), one function per entry of struct Kernels (tensor/kernels.h),
// grouped by the file that defines them. Every kernel may assume what kernels.h promises:
// contiguous tensors on one CPU device, shapes checked, outputs allocated.
#pragma once

#include <cstdint>

#include "tensor/kernels.h"

namespace pipewright::cpu {

/// The CPU table, with every entry filled.
const Kernels& kernel_table();

// elementwise.cc
void fill(Tensor& out, double value);
void copy_strided(const Tensor& src, Tensor& dst);
void cast(const Tensor& src, Tensor& dst);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
void binary_scalar(BinaryOp op, const Tensor& a, double s, Tensor& out);
void unary(UnaryOp op, const Tensor& x, Tensor& out);
void relu_backward(const Tensor& grad, const Tensor& y, Tensor& out);
void axpy(double alpha, const Tensor& x, Tensor& y);
void index_select(const Tensor& src, const Tensor& index, Tensor& out);

// reduce.cc
void reduce(ReduceOp op, const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out);
void argmax(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out);

// gemm.cc
void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
          double beta, Tensor& c);

// softmax.cc
void softmax(const Tensor& x, bool log, Tensor& out);
void softmax_backward(const Tensor& grad, const Tensor& y, bool log, Tensor& out);

// loss.cc
void cross_entropy(const Tensor& logp, const Tensor& target, double eps, Tensor& loss);
void cross_entropy_backward(const Tensor& logp, const Tensor& target, double eps,
                            const Tensor& grad_loss, Tensor& grad_logits);

// batch_norm.cc
void batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                      int64_t n, int64_t c, int64_t l, Tensor& y, Tensor& mean, Tensor& invstd,
                      Tensor& var);
void batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                     const Tensor& running_mean, const Tensor& running_var, double eps,
                     int64_t n, int64_t c, int64_t l, Tensor& y);
void batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& gamma,
                         const Tensor& mean, const Tensor& invstd, int64_t n, int64_t c,
                         int64_t l, Tensor& grad_x, Tensor& grad_gamma, Tensor& grad_beta);

// random.cc
void philox_uniform(uint64_t seed, uint64_t offset, double lo, double hi, Tensor& out);
void philox_normal(uint64_t seed, uint64_t offset, double mean, double std, Tensor& out);
void dropout(uint64_t seed, uint64_t offset, double p, const Tensor& x, Tensor& out,
             Tensor& mask);

// optim.cc
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr,
              double momentum, double dampening, double weight_decay, bool nesterov,
              bool first_step);
void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
               double lr, double beta1, double beta2, double eps, double weight_decay,
               bool decoupled, int64_t step);

}  // namespace pipewright::cpu
