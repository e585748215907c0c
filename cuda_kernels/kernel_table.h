// The CUDA kernels, one function per entry of struct Kernels (tensor/kernels.h), grouped by
// the file that defines them; cuda_kernels/register.cc puts them in DeviceType::kCUDA's table.
//
// Every kernel may assume what kernels.h promises (contiguous tensors on one CUDA device,
// shapes checked, outputs allocated). Work is queued on the calling thread's current stream
// of that device and is asynchronous: results are ready for later work on the same stream,
// and for the host after a synchronize or a copy to the CPU. Exceptions: cross_entropy,
// cross_entropy_backward and index_select wait for their stream to check their indices.
// Dtypes: float32 and float64, like the CPU kernels; int64 too where a comment says so.
// Anything else throws std::invalid_argument naming the op and the dtype.
#pragma once

#include <cstdint>

#include "tensor/kernels.h"

namespace pipewright::cuda {

/// The CUDA table, with every entry filled.
const Kernels& kernel_table();

// elementwise.cu  (fill: also int64)
void fill(Tensor& out, double value);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
void binary_scalar(BinaryOp op, const Tensor& a, double s, Tensor& out);
void unary(UnaryOp op, const Tensor& x, Tensor& out);
void relu_backward(const Tensor& grad, const Tensor& y, Tensor& out);
void axpy(double alpha, const Tensor& x, Tensor& y);

// copy.cu  (any dtype: copies move bytes; cast converts between all three)
void copy_strided(const Tensor& src, Tensor& dst);
void cast(const Tensor& src, Tensor& dst);

// reduce.cu
void reduce(ReduceOp op, const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out);
void argmax(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out);

// gemm.cc  (cuBLAS)
void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
          double beta, Tensor& c);

// softmax.cu
void softmax(const Tensor& x, bool log, Tensor& out);
void softmax_backward(const Tensor& grad, const Tensor& y, bool log, Tensor& out);

// cross_entropy.cu
void cross_entropy(const Tensor& logp, const Tensor& target, double eps, Tensor& loss);
void cross_entropy_backward(const Tensor& logp, const Tensor& target, double eps,
                            const Tensor& grad_loss, Tensor& grad_logits);

// batch_norm.cu
void batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                      int64_t n, int64_t c, int64_t l, Tensor& y, Tensor& mean, Tensor& invstd,
                      Tensor& var);
void batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                     const Tensor& running_mean, const Tensor& running_var, double eps,
                     int64_t n, int64_t c, int64_t l, Tensor& y);
void batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& gamma,
                         const Tensor& mean, const Tensor& invstd, int64_t n, int64_t c,
                         int64_t l, Tensor& grad_x, Tensor& grad_gamma, Tensor& grad_beta);

// random.cu  (bit-identical to the CPU kernels: tensor/philox.h)
void philox_uniform(uint64_t seed, uint64_t offset, double lo, double hi, Tensor& out);
void philox_normal(uint64_t seed, uint64_t offset, double mean, double std, Tensor& out);
void dropout(uint64_t seed, uint64_t offset, double p, const Tensor& x, Tensor& out,
             Tensor& mask);

// index_select.cu  (src of any dtype)
void index_select(const Tensor& src, const Tensor& index, Tensor& out);

// optim.cu
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr,
              double momentum, double dampening, double weight_decay, bool nesterov,
              bool first_step);
void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
               double lr, double beta1, double beta2, double eps, double weight_decay,
               bool decoupled, int64_t step);

}  // namespace pipewright::cuda
