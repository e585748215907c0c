// Tensor ops (not differentiable; see autograd/functions.h for the differentiable versions).
//
// Each op validates its arguments, makes inputs contiguous, allocates the result on the
// inputs' device and runs that device's kernel (tensor/kernels.h). Unless stated otherwise:
//  - inputs must share one device and one dtype, else std::invalid_argument naming both
//    operands' shapes, dtypes and devices;
//  - floating ops accept float32 and float64 only;
//  - results are new contiguous tensors (no autograd history).
// Semantics follow PyTorch's functions of the same name.
#pragma once

#include <cstdint>

#include "tensor/kernels.h"
#include "tensor/tensor.h"

namespace pipewright::ops {

// ---- elementwise, with broadcasting of the second operand ----
// b may have a's shape, one element, or a's trailing dims (a row vector [C] against [N, C]).
// The first operand may instead be the smaller one; the result has the larger shape.
// Anything else throws std::invalid_argument "add: cannot broadcast [3] against [2, 4]".
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, double s);
/// s - a, s / a.
Tensor rsub(const Tensor& a, double s);
Tensor rdiv(const Tensor& a, double s);

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
/// grad * (y > 0), y = relu(x) (same shape as grad).
Tensor relu_backward(const Tensor& grad, const Tensor& y);

// ---- in place (dst must be contiguous; returns nothing) ----
/// dst = value.
void fill_(Tensor& dst, double value);
/// dst += alpha * src (same numel, dtype, device).
void add_(Tensor& dst, const Tensor& src, double alpha = 1.0);
/// dst *= s.
void mul_(Tensor& dst, double s);
/// dst *= b, b broadcasting over dst as in mul (dst's shape, one element, or its trailing
/// dims); same device and dtype. Throws std::invalid_argument as mul does, and when b does
/// not broadcast over dst (dst keeps its shape).
void mul_(Tensor& dst, const Tensor& b);

// ---- reductions ----
/// Sum / mean / max over dimension `dim` (negative counts from the end); keepdim keeps it as
/// size 1. Max propagates NaN (torch.max): a NaN among the reduced elements gives NaN. Throws
/// std::out_of_range for a bad dim; max of an empty dim throws std::invalid_argument.
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
/// int64 index of the first maximum along `dim`; NaN counts as the maximum (torch.argmax: the
/// first NaN's index).
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
/// Over all elements: rank-0 results.
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
/// total += Σ x² (p = 2) or Σ |x| (p = 1), widened to float64: a gradient's share of a p-norm
/// (torch.nn.utils.clip_grad_norm_'s Σ|g|^p). The terms are rounded to x's dtype and summed in
/// the order of sum(x), so total gets the bits of `add(total, sum(square(x)).to(kFloat64))`;
/// on a GPU in one pass instead of those four ops (Note [Norm shares], cuda_kernels/reduce.cu).
/// x: float32 or float64, any shape (empty: total unchanged). total: float64 with one element
/// on x's device, updated in place. Throws std::invalid_argument for another p, another
/// dtype of x, or a total that is not that.
void add_norm_share_(Tensor& total, const Tensor& x, double p);

// ---- linear algebra ----
/// op(a) · op(b) for 2-D a, b; op(x) = xᵀ when the flag is set (no transposed copy is made).
/// Shapes: op(a) [M, K], op(b) [K, N] -> [M, N]; throws std::invalid_argument naming both
/// shapes and flags when the inner sizes differ, and both when the dtypes or devices differ.
/// Dtypes: float32 or float64 give their own; two bfloat16 or two float16 operands give float32,
/// products and sums in float32 (mixed precision: cuBLAS's GemmEx with CUBLAS_COMPUTE_32F; the
/// CPU widens them exactly and runs the float32 GEMM).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
/// op(a)·op(b) + bias, the bias [N] added to every row of the [M, N] product (torch.addmm(bias,
/// a, b); a Linear's forward). Shapes and dtypes as matmul's; bias of the result's dtype and
/// a's device. On a GPU the bias is added in the GEMM's epilogue (one pass over the result;
/// Note [The bias in the epilogue], cuda_kernels/gemm.cc). Throws std::invalid_argument as
/// matmul does, and naming the bias for another shape, dtype or device.
Tensor matmul_bias(const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a = false,
                   bool trans_b = false);
/// c = alpha * op(a)·op(b) + beta * c, in place (c contiguous [M, N]; float32 for 16-bit a, b,
/// else their dtype).
void gemm_(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
           double alpha = 1.0, double beta = 0.0);

// ---- softmax family (over the last dim; x of rank >= 1, treated as [rows, last]) ----
Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x);

// ---- indexing ----
/// Rows of src (dim 0) picked by the int64 `index` [K] -> [K, ...]. Throws std::out_of_range
/// naming an index outside [0, size(0)).
Tensor index_select(const Tensor& src, const Tensor& index);

// ---- comparisons for tests ----
/// max |a - b| over all elements (same shape; any devices; as double).
double max_abs_diff(const Tensor& a, const Tensor& b);
/// |a - b| <= atol + rtol * |b| elementwise.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
/// Same shape, dtype and bitwise-equal elements.
bool equal(const Tensor& a, const Tensor& b);

}  // namespace pipewright::ops
