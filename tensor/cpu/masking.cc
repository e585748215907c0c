// Masking kernels: masked_fill, triangular (tril / triu), causal_softmax and its backward.
//
// Shape legend: B = matrices, L = rows (queries), S = columns (keys); x, y, grad [B, L, S]
// contiguous. Row i of each matrix is causal: keys j <= i count, j > i are masked. Rows are
// split across the intra-op threads; each row's softmax is an Eigen array expression
// (vectorised exp).
#include <algorithm>

#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {
namespace {

/// Keys row r (of a [B, L, S] stack) may see: min(i + 1, S) with i = r % L.
inline int64_t causal_length(int64_t r, int64_t rows, int64_t cols) {
  return std::min(r % rows + 1, cols);
}

template <class T>
void causal_softmax_typed(const Tensor& x, T scale, Tensor& y) {
  const int64_t rows = x.size(1), cols = x.size(2), total = x.size(0) * rows;
  parallel_for(total, 4 * cols, [&](int64_t r, int64_t e) {
    for (; r < e; ++r) {
      const int64_t len = causal_length(r, rows, cols);
      const ConstVec<T> xr(x.data<T>() + r * cols, len);
      Vec<T> yr(y.data<T>() + r * cols, cols);
      const T m = (xr * scale).maxCoeff();  // subtracted: exp() never overflows
      yr.head(len) = (xr * scale - m).exp();
      yr.head(len) /= yr.head(len).sum();
      yr.tail(cols - len).setZero();
    }
  });
}

template <class T>
void causal_softmax_backward_typed(const Tensor& grad, const Tensor& y, T scale, Tensor& gx) {
  const int64_t rows = y.size(1), cols = y.size(2), total = y.size(0) * rows;
  parallel_for(total, 3 * cols, [&](int64_t r, int64_t e) {
    for (; r < e; ++r) {
      const int64_t len = causal_length(r, rows, cols);
      const ConstVec<T> g(grad.data<T>() + r * cols, len), yr(y.data<T>() + r * cols, len);
      Vec<T> out_r(gx.data<T>() + r * cols, cols);
      out_r.head(len) = scale * yr * (g - (g * yr).sum());
      out_r.tail(cols - len).setZero();
    }
  });
}

}  // namespace

void masked_fill(const Tensor& x, const Tensor& mask, double value, Tensor& o) {
  const int64_t n = x.numel(), period = mask.numel();
  dispatch_all(x.dtype(), "masked_fill", [&](auto x_zero) {
    dispatch_all(mask.dtype(), "masked_fill", [&](auto mask_zero) {
      using T = decltype(x_zero);
      using M = decltype(mask_zero);
      const T* xp = x.data<T>();
      const M* mp = mask.data<M>();
      T* op = o.data<T>();
      const T fill = static_cast<T>(value);
      parallel_for(n / period, period, [&](int64_t b, int64_t e) {
        for (; b < e; ++b) {
          for (int64_t j = 0; j < period; ++j) {
            const int64_t i = b * period + j;
            op[i] = mp[j] != M(0) ? fill : xp[i];
          }
        }
      });
    });
  });
}

void triangular(const Tensor& x, int64_t diagonal, bool upper, Tensor& o) {
  const int64_t rows = x.size(1), cols = x.size(2), total = x.size(0) * rows;
  dispatch_all(x.dtype(), "triangular", [&](auto zero) {
    using T = decltype(zero);
    parallel_for(total, cols, [&](int64_t r, int64_t e) {
      for (; r < e; ++r) {
        const int64_t i = r % rows;
        const T* xr = x.data<T>() + r * cols;
        T* orow = o.data<T>() + r * cols;
        for (int64_t j = 0; j < cols; ++j) {
          const bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
          orow[j] = keep ? xr[j] : T(0);
        }
      }
    });
  });
}

void causal_softmax(const Tensor& x, double scale, Tensor& out) {
  dispatch_floating(x.dtype(), "causal_softmax", [&](auto zero) {
    using T = decltype(zero);
    causal_softmax_typed<T>(x, static_cast<T>(scale), out);
  });
}

void causal_softmax_backward(const Tensor& grad, const Tensor& y, double scale, Tensor& out) {
  dispatch_floating(y.dtype(), "causal_softmax_backward", [&](auto zero) {
    using T = decltype(zero);
    causal_softmax_backward_typed<T>(grad, y, static_cast<T>(scale), out);
  });
}

}  // namespace pipewright::cpu
