// GELU forward and backward, elementwise Eigen array expressions on contiguous ranges split
// across the intra-op threads. float32's erf, exp and tanh are Eigen's vectorised
// approximations (a few ulp); float64's are the C library's.
//
//   exact:  y = x Φ(x),  Φ(x) = (1 + erf(x/√2)) / 2,  y' = Φ(x) + x φ(x),  φ(x) = e^(-x²/2)/√(2π)
//   tanh:   u = √(2/π) (x + 0.044715 x³),  t = tanh(u),  y = x (1 + t) / 2,
//           y' = (1 + t) / 2 + x (1 - t²) √(2/π) (1 + 3 · 0.044715 x²) / 2
#include <unsupported/Eigen/SpecialFunctions>

#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {
namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;      // 1/√2
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/√(2π)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // √(2/π)
constexpr double kCubic = 0.044715;

// Elements per chunk: the temporaries of one chunk stay in L1.
constexpr int64_t kChunk = 1024;

template <class T>
void gelu_range(const T* x, T* y, int64_t n, bool tanh_approximation) {
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    const ConstVec<T> xv(x + i, len);
    Vec<T> yv(y + i, len);
    if (tanh_approximation) {
      const auto u = T(kSqrt2OverPi) * (xv + T(kCubic) * xv.cube());
      yv = T(0.5) * xv * (T(1) + u.tanh());
    } else {
      yv = T(0.5) * xv * (T(1) + (xv * T(kSqrt1_2)).erf());
    }
  }
}

template <class T>
void gelu_backward_range(const T* g, const T* x, T* out, int64_t n, bool tanh_approximation) {
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    const ConstVec<T> gv(g + i, len), xv(x + i, len);
    Vec<T> ov(out + i, len);
    if (tanh_approximation) {
      const Eigen::Array<T, Eigen::Dynamic, 1> t =
          (T(kSqrt2OverPi) * (xv + T(kCubic) * xv.cube())).tanh();
      ov = gv * (T(0.5) * (T(1) + t) + T(0.5 * kSqrt2OverPi) * xv * (T(1) - t.square()) *
                                             (T(1) + T(3 * kCubic) * xv.square()));
    } else {
      ov = gv * (T(0.5) * (T(1) + (xv * T(kSqrt1_2)).erf()) +
                 T(kInvSqrt2Pi) * xv * (T(-0.5) * xv.square()).exp());
    }
  }
}

}  // namespace

void gelu(const Tensor& x, bool tanh_approximation, Tensor& out) {
  dispatch_floating(x.dtype(), "gelu", [&](auto zero) {
    using T = decltype(zero);
    parallel_for(x.numel(), 16, [&](int64_t b, int64_t e) {
      gelu_range<T>(x.data<T>() + b, out.data<T>() + b, e - b, tanh_approximation);
    });
  });
}

void gelu_backward(const Tensor& grad, const Tensor& x, bool tanh_approximation, Tensor& out) {
  dispatch_floating(x.dtype(), "gelu_backward", [&](auto zero) {
    using T = decltype(zero);
    parallel_for(x.numel(), 24, [&](int64_t b, int64_t e) {
      gelu_backward_range<T>(grad.data<T>() + b, x.data<T>() + b, out.data<T>() + b, e - b,
                             tanh_approximation);
    });
  });
}

}  // namespace pipewright::cpu
