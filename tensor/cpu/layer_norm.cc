// LayerNorm / RMSNorm forward and backward, fused: one pass over each row for the statistics
// and one to write y (forward); one pass per row for grad_x and one over the columns for
// grad_weight and grad_bias (backward).
//
// Shape legend: x, y, grad_y, grad_x [rows, C]; weight, bias, grad_weight, grad_bias [C];
// mean, rstd [rows]. Rows are split across the intra-op threads for the forward and for
// grad_x; columns for grad_weight / grad_bias, each column summed over the rows in row order,
// so every result is the same whatever the thread count.
//
//   forward:  mean = Σ x / C (RMSNorm: 0),  rstd = 1/√(Σ (x - mean)² / C + eps),
//             y = (x - mean) · rstd · w + b
//   backward: x̂ = (x - mean) · rstd,  ĝ = g · w
//             grad_x = rstd · (ĝ - mean(ĝ) - x̂ · mean(ĝ x̂))   (RMSNorm: no mean(ĝ) term)
//             grad_w = Σ_rows g x̂,  grad_b = Σ_rows g
#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {
namespace {

template <class T>
void layer_norm_typed(const Tensor& x, const Tensor& weight, const Tensor& bias, T eps, bool rms,
                      Tensor& y, Tensor& mean, Tensor& rstd) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const T* w = weight.defined() ? weight.data<T>() : nullptr;
  const T* b = bias.defined() ? bias.data<T>() : nullptr;
  parallel_for(rows, 4 * cols, [&](int64_t r, int64_t e) {
    for (; r < e; ++r) {
      const ConstVec<T> xr(x.data<T>() + r * cols, cols);
      Vec<T> yr(y.data<T>() + r * cols, cols);
      const T mu = rms ? T(0) : xr.sum() / T(cols);
      const T s = T(1) / std::sqrt((xr - mu).square().sum() / T(cols) + eps);
      if (!rms) mean.data<T>()[r] = mu;
      rstd.data<T>()[r] = s;
      if (w != nullptr && b != nullptr) {
        yr = (xr - mu) * s * ConstVec<T>(w, cols) + ConstVec<T>(b, cols);
      } else if (w != nullptr) {
        yr = (xr - mu) * s * ConstVec<T>(w, cols);
      } else {
        yr = (xr - mu) * s;
        if (b != nullptr) yr += ConstVec<T>(b, cols);
      }
    }
  });
}

/// grad_x, row by row.
template <class T>
void input_grad(const Tensor& g, const Tensor& x, const T* w, const T* mean, const T* rstd,
                Tensor& grad_x) {
  const int64_t rows = x.size(0), cols = x.size(1);
  parallel_for(rows, 6 * cols, [&](int64_t r, int64_t e) {
    Eigen::Array<T, Eigen::Dynamic, 1> gh(cols), xh(cols);
    for (; r < e; ++r) {
      const ConstVec<T> gr(g.data<T>() + r * cols, cols), xr(x.data<T>() + r * cols, cols);
      const T mu = mean == nullptr ? T(0) : mean[r], s = rstd[r];
      xh = (xr - mu) * s;
      if (w != nullptr) {
        gh = gr * ConstVec<T>(w, cols);
      } else {
        gh = gr;
      }
      const T a = mean == nullptr ? T(0) : gh.sum() / T(cols);
      const T c = (gh * xh).sum() / T(cols);
      Vec<T>(grad_x.data<T>() + r * cols, cols) = s * (gh - a - xh * c);
    }
  });
}

/// grad_weight and grad_bias (either may be undefined), column block by column block.
template <class T>
void weight_grads(const Tensor& g, const Tensor& x, const T* mean, const T* rstd,
                  Tensor& grad_weight, Tensor& grad_bias) {
  const int64_t rows = x.size(0), cols = x.size(1);
  T* gw = grad_weight.defined() ? grad_weight.data<T>() : nullptr;
  T* gb = grad_bias.defined() ? grad_bias.data<T>() : nullptr;
  parallel_for(cols, 3 * rows, [&](int64_t c0, int64_t c1) {
    const int64_t width = c1 - c0;
    Eigen::Array<T, Eigen::Dynamic, 1> acc_w = Eigen::Array<T, Eigen::Dynamic, 1>::Zero(width);
    Eigen::Array<T, Eigen::Dynamic, 1> acc_b = Eigen::Array<T, Eigen::Dynamic, 1>::Zero(width);
    for (int64_t r = 0; r < rows; ++r) {
      const ConstVec<T> gr(g.data<T>() + r * cols + c0, width);
      if (gw != nullptr) {
        const ConstVec<T> xr(x.data<T>() + r * cols + c0, width);
        const T mu = mean == nullptr ? T(0) : mean[r];
        acc_w += gr * ((xr - mu) * rstd[r]);
      }
      if (gb != nullptr) acc_b += gr;
    }
    if (gw != nullptr) Vec<T>(gw + c0, width) = acc_w;
    if (gb != nullptr) Vec<T>(gb + c0, width) = acc_b;
  });
}

}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool rms,
                Tensor& y, Tensor& mean, Tensor& rstd) {
  dispatch_floating(x.dtype(), "layer_norm", [&](auto zero) {
    using T = decltype(zero);
    layer_norm_typed<T>(x, weight, bias, static_cast<T>(eps), rms, y, mean, rstd);
  });
}

void layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, bool rms, Tensor& grad_x,
                         Tensor& grad_weight, Tensor& grad_bias) {
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto zero) {
    using T = decltype(zero);
    const T* mu = rms ? nullptr : mean.data<T>();
    if (grad_x.defined()) {
      input_grad<T>(grad_y, x, weight.defined() ? weight.data<T>() : nullptr, mu,
                    rstd.data<T>(), grad_x);
    }
    if (grad_weight.defined() || grad_bias.defined()) {
      weight_grads<T>(grad_y, x, mu, rstd.data<T>(), grad_weight, grad_bias);
    }
  });
}

}  // namespace pipewright::cpu
