// Softmax and log-softmax over the last dim. Shape legend: x, y, grad [rows, cols], row-major;
// one row per softmax, rows split across intra-op threads.
#include <cmath>

#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {
namespace {

/// Row r of a [rows, cols] tensor as a 1-D array.
template <class T>
ConstVec<T> row_in(const Tensor& t, int64_t r, int64_t cols) {
  return ConstVec<T>(t.data<T>() + r * cols, cols);
}
template <class T>
Vec<T> row_out(const Tensor& t, int64_t r, int64_t cols) {
  return Vec<T>(t.data<T>() + r * cols, cols);
}

template <class T>
void softmax_typed(const Tensor& x, bool log, Tensor& y) {
  const int64_t rows = x.size(0), cols = x.size(1);
  if (cols == 0) return;
  parallel_for(rows, 4 * cols, [&](int64_t r, int64_t e) {
    for (; r < e; ++r) {
      const ConstVec<T> xr = row_in<T>(x, r, cols);
      Vec<T> yr = row_out<T>(y, r, cols);
      const T m = xr.maxCoeff();  // subtracting the max keeps exp() from overflowing
      if (log) {
        const T log_sum = std::log((xr - m).exp().sum());
        yr = (xr - m) - log_sum;  // x - m first: exact-ish for large x, unlike x - (m + log_sum)
      } else {
        yr = (xr - m).exp();
        yr /= yr.sum();
      }
    }
  });
}

template <class T>
void softmax_backward_typed(const Tensor& grad, const Tensor& y, bool log, Tensor& gx) {
  const int64_t rows = grad.size(0), cols = grad.size(1);
  parallel_for(rows, 4 * cols, [&](int64_t r, int64_t e) {
    for (; r < e; ++r) {
      const ConstVec<T> g = row_in<T>(grad, r, cols), yr = row_in<T>(y, r, cols);
      Vec<T> out_r = row_out<T>(gx, r, cols);
      if (log) {
        out_r = g - yr.exp() * g.sum();  // y = log softmax: exp(y) is the softmax
      } else {
        out_r = yr * (g - (g * yr).sum());
      }
    }
  });
}

}  // namespace

void softmax(const Tensor& x, bool log, Tensor& out) {
  dispatch_floating(x.dtype(), "softmax",
                    [&](auto zero) { softmax_typed<decltype(zero)>(x, log, out); });
}

void softmax_backward(const Tensor& grad, const Tensor& y, bool log, Tensor& out) {
  dispatch_floating(grad.dtype(), "softmax_backward",
                    [&](auto zero) { softmax_backward_typed<decltype(zero)>(grad, y, log, out); });
}

}  // namespace pipewright::cpu
