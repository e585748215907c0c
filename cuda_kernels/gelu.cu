// GELU forward and backward, one thread per element (grid-stride), in the tensor's dtype with
// the CUDA math library's erf, exp and tanh (a few ulp from the CPU's Eigen approximations).
//
//   exact:  y = x Φ(x),  Φ(x) = (1 + erf(x/√2)) / 2,  y' = Φ(x) + x e^(-x²/2) / √(2π)
//   tanh:   t = tanh(√(2/π) (x + 0.044715 x³)),  y = x (1 + t) / 2,
//           y' = (1 + t) / 2 + x (1 - t²) √(2/π) (1 + 3 · 0.044715 x²) / 2
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kCubic = 0.044715;

template <class T>
__global__ void gelu_kernel(const T* x, T* out, int64_t n, bool tanh_approximation) {
  PW_GRID_STRIDE_LOOP(i, n) {
    const T v = x[i];
    if (tanh_approximation) {
      out[i] = T(0.5) * v * (T(1) + tanh(T(kSqrt2OverPi) * (v + T(kCubic) * v * v * v)));
    } else {
      out[i] = T(0.5) * v * (T(1) + erf(v * T(kSqrt1_2)));
    }
  }
}

template <class T>
__global__ void gelu_backward_kernel(const T* grad, const T* x, T* out, int64_t n,
                                     bool tanh_approximation) {
  PW_GRID_STRIDE_LOOP(i, n) {
    const T v = x[i];
    T d;
    if (tanh_approximation) {
      const T t = tanh(T(kSqrt2OverPi) * (v + T(kCubic) * v * v * v));
      d = T(0.5) * (T(1) + t) +
          T(0.5 * kSqrt2OverPi) * v * (T(1) - t * t) * (T(1) + T(3 * kCubic) * v * v);
    } else {
      d = T(0.5) * (T(1) + erf(v * T(kSqrt1_2))) + T(kInvSqrt2Pi) * v * exp(T(-0.5) * v * v);
    }
    out[i] = grad[i] * d;
  }
}

}  // namespace

void gelu(const Tensor& x, bool tanh_approximation, Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  dispatch_floating(x.dtype(), "gelu", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(gelu_kernel<T>, grid_for(n), kBlock, 0, ctx.stream)(x.data<T>(), out.data<T>(), n,
                                                                  tanh_approximation);
  });
  PW_CUDA_CHECK_LAUNCH("gelu_kernel");
}

void gelu_backward(const Tensor& grad, const Tensor& x, bool tanh_approximation, Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  dispatch_floating(x.dtype(), "gelu_backward", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(gelu_backward_kernel<T>, grid_for(n), kBlock, 0, ctx.stream)(
        grad.data<T>(), x.data<T>(), out.data<T>(), n, tanh_approximation);
  });
  PW_CUDA_CHECK_LAUNCH("gelu_backward_kernel");
}

}  // namespace pipewright::cuda
