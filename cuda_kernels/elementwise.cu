// Elementwise kernels: fill, binary (with the period broadcast), binary with a scalar, unary
// maps, relu_backward and axpy. One thread per element, grid-stride loops (launch.cuh).
//
// Shape legend: n = numel of the output; period = b.numel() for binary (b repeats every
// `period` elements of a: equal to n, 1, or a's trailing dims). All tensors contiguous.
// Dtypes: fill every dtype (bfloat16 and float16 too); everything else float32 / float64
// (like the CPU kernels).
// Math: the CUDA math library (expf, tanh, ...), accurate to a few ulp, so results match the
// CPU to a relative 1e-6 (float32) / 1e-14 (float64), not bit for bit.
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

template <class T>
__global__ void fill_kernel(T* out, int64_t n, T value) {
  PW_GRID_STRIDE_LOOP(i, n) { out[i] = value; }
}

template <class T>
__device__ inline T apply(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kRSub: return b - a;
    case BinaryOp::kRDiv: return b / a;
  }
  return a;
}

// `op` is a template argument so each kernel body is one instruction, not a switch per element.
template <class T, BinaryOp op>
__global__ void binary_kernel(const T* a, const T* b, T* out, int64_t n, int64_t period) {
  PW_GRID_STRIDE_LOOP(i, n) {
    const int64_t j = period == n ? i : (period == 1 ? 0 : i % period);
    out[i] = apply(op, a[i], b[j]);
  }
}

template <class T, BinaryOp op>
__global__ void binary_scalar_kernel(const T* a, T s, T* out, int64_t n) {
  PW_GRID_STRIDE_LOOP(i, n) { out[i] = apply(op, a[i], s); }
}

template <class T, UnaryOp op>
__device__ inline T apply_unary(T x) {
  if constexpr (op == UnaryOp::kNeg) return -x;
  if constexpr (op == UnaryOp::kExp) return exp(x);
  if constexpr (op == UnaryOp::kLog) return log(x);
  if constexpr (op == UnaryOp::kSqrt) return sqrt(x);
  if constexpr (op == UnaryOp::kRelu) return x > T(0) ? x : T(0);  // NaN -> 0
  if constexpr (op == UnaryOp::kSquare) return x * x;
  if constexpr (op == UnaryOp::kAbs) return fabs(x);
  if constexpr (op == UnaryOp::kTanh) return tanh(x);
  if constexpr (op == UnaryOp::kSigmoid) return T(1) / (T(1) + exp(-x));
  if constexpr (op == UnaryOp::kErf) return erf(x);
  return x;
}

template <class T, UnaryOp op>
__global__ void unary_kernel(const T* x, T* out, int64_t n) {
  PW_GRID_STRIDE_LOOP(i, n) { out[i] = apply_unary<T, op>(x[i]); }
}

template <class T>
__global__ void relu_backward_kernel(const T* grad, const T* y, T* out, int64_t n) {
  PW_GRID_STRIDE_LOOP(i, n) { out[i] = y[i] > T(0) ? grad[i] : T(0); }
}

template <class T>
__global__ void axpy_kernel(T alpha, const T* x, T* y, int64_t n) {
  PW_GRID_STRIDE_LOOP(i, n) { y[i] += alpha * x[i]; }
}

/// Calls f(std::integral_constant<BinaryOp, op>{}) for the runtime `op`.
template <class F>
void dispatch_binary(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::kAdd: f(std::integral_constant<BinaryOp, BinaryOp::kAdd>{}); return;
    case BinaryOp::kSub: f(std::integral_constant<BinaryOp, BinaryOp::kSub>{}); return;
    case BinaryOp::kMul: f(std::integral_constant<BinaryOp, BinaryOp::kMul>{}); return;
    case BinaryOp::kDiv: f(std::integral_constant<BinaryOp, BinaryOp::kDiv>{}); return;
    case BinaryOp::kRSub: f(std::integral_constant<BinaryOp, BinaryOp::kRSub>{}); return;
    case BinaryOp::kRDiv: f(std::integral_constant<BinaryOp, BinaryOp::kRDiv>{}); return;
  }
  throw std::invalid_argument("cuda binary: unknown BinaryOp " +
                              std::to_string(static_cast<int>(op)));
}

template <class F>
void dispatch_unary(UnaryOp op, F&& f) {
  switch (op) {
    case UnaryOp::kNeg: f(std::integral_constant<UnaryOp, UnaryOp::kNeg>{}); return;
    case UnaryOp::kExp: f(std::integral_constant<UnaryOp, UnaryOp::kExp>{}); return;
    case UnaryOp::kLog: f(std::integral_constant<UnaryOp, UnaryOp::kLog>{}); return;
    case UnaryOp::kSqrt: f(std::integral_constant<UnaryOp, UnaryOp::kSqrt>{}); return;
    case UnaryOp::kRelu: f(std::integral_constant<UnaryOp, UnaryOp::kRelu>{}); return;
    case UnaryOp::kSquare: f(std::integral_constant<UnaryOp, UnaryOp::kSquare>{}); return;
    case UnaryOp::kAbs: f(std::integral_constant<UnaryOp, UnaryOp::kAbs>{}); return;
    case UnaryOp::kTanh: f(std::integral_constant<UnaryOp, UnaryOp::kTanh>{}); return;
    case UnaryOp::kSigmoid: f(std::integral_constant<UnaryOp, UnaryOp::kSigmoid>{}); return;
    case UnaryOp::kErf: f(std::integral_constant<UnaryOp, UnaryOp::kErf>{}); return;
  }
  throw std::invalid_argument("cuda unary: unknown UnaryOp " +
                              std::to_string(static_cast<int>(op)));
}

}  // namespace

void fill(Tensor& out, double value) {
  const int64_t n = out.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  dispatch_any(out.dtype(), "fill", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(fill_kernel<T>, grid_for(n), kBlock, 0, ctx.stream)(
        out.data<T>(), n, static_cast<T>(value));
  });
  PW_CUDA_CHECK_LAUNCH("fill_kernel");
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = a.numel(), period = b.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  dispatch_floating(a.dtype(), "binary", [&](auto zero) {
    using T = decltype(zero);
    dispatch_binary(op, [&](auto op_c) {
      PW_LAUNCH((binary_kernel<T, decltype(op_c)::value>), grid_for(n), kBlock, 0, ctx.stream)(
          a.data<T>(), b.data<T>(), out.data<T>(), n, period);
    });
  });
  PW_CUDA_CHECK_LAUNCH("binary_kernel");
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, Tensor& out) {
  const int64_t n = a.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  dispatch_floating(a.dtype(), "binary_scalar", [&](auto zero) {
    using T = decltype(zero);
    dispatch_binary(op, [&](auto op_c) {
      PW_LAUNCH((binary_scalar_kernel<T, decltype(op_c)::value>), grid_for(n), kBlock, 0,
                ctx.stream)(
          a.data<T>(), static_cast<T>(s), out.data<T>(), n);
    });
  });
  PW_CUDA_CHECK_LAUNCH("binary_scalar_kernel");
}

void unary(UnaryOp op, const Tensor& x, Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  dispatch_floating(x.dtype(), "unary", [&](auto zero) {
    using T = decltype(zero);
    dispatch_unary(op, [&](auto op_c) {
      PW_LAUNCH((unary_kernel<T, decltype(op_c)::value>), grid_for(n), kBlock, 0, ctx.stream)(
          x.data<T>(), out.data<T>(), n);
    });
  });
  PW_CUDA_CHECK_LAUNCH("unary_kernel");
}

void relu_backward(const Tensor& grad, const Tensor& y, Tensor& out) {
  const int64_t n = grad.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  dispatch_floating(grad.dtype(), "relu_backward", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(relu_backward_kernel<T>, grid_for(n), kBlock, 0, ctx.stream)(
        grad.data<T>(), y.data<T>(), out.data<T>(), n);
  });
  PW_CUDA_CHECK_LAUNCH("relu_backward_kernel");
}

void axpy(double alpha, const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  LaunchContext ctx(y);
  dispatch_floating(x.dtype(), "axpy", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(axpy_kernel<T>, grid_for(n), kBlock, 0, ctx.stream)(
        static_cast<T>(alpha), x.data<T>(), y.data<T>(), n);
  });
  PW_CUDA_CHECK_LAUNCH("axpy_kernel");
}

}  // namespace pipewright::cuda
