// BatchNorm over channels. Shape legend: x, y, grad [N, C, L] contiguous (L = 1 for 2-D input,
// the spatial size otherwise); gamma, beta, mean, invstd, running stats [C]; M = N * L values
// per channel.
//
// Threads split the channels: each range [c0, c1) walks the N samples and, for each, the
// [c1 - c0, L] block of x they own, so per-channel statistics are sums in a fixed order
// (deterministic) and accumulate in double whatever the tensor dtype.
#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {
namespace {

using Eigen::ArrayXd;

/// The channels [c0, c1) of one [N, C, L] tensor.
struct ChannelRange {
  int64_t c, l, c0, c1;
  int64_t size() const { return c1 - c0; }
  /// Sample `s`'s [c1 - c0, L] block of t, as double.
  template <class T>
  auto block(const Tensor& t, int64_t s) const {
    return ConstMat<T>(t.data<T>() + (s * c + c0) * l, size(), l).template cast<double>();
  }
  template <class T>
  Mat<T> block_out(const Tensor& t, int64_t s) const {
    return Mat<T>(t.data<T>() + (s * c + c0) * l, size(), l);
  }
  /// Per-channel parameter t[c0, c1) as double; `fallback` when t is undefined (affine=false).
  template <class T>
  ArrayXd param(const Tensor& t, double fallback) const {
    if (!t.defined()) return ArrayXd::Constant(size(), fallback);
    return ConstVec<T>(t.data<T>() + c0, size()).template cast<double>();
  }
};

/// y = x * scale + shift per channel.
template <class T>
void affine(const Tensor& x, const ArrayXd& scale, const ArrayXd& shift, int64_t n,
            const ChannelRange& r, Tensor& y) {
  for (int64_t s = 0; s < n; ++s) {
    r.block_out<T>(y, s) =
        ((r.block<T>(x, s).colwise() * scale).colwise() + shift).template cast<T>();
  }
}

template <class T>
void train_typed(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, int64_t n,
                 int64_t c, int64_t l, Tensor& y, Tensor& mean_out, Tensor& invstd_out) {
  const double m = static_cast<double>(n * l);
  parallel_for(c, n * l, [&](int64_t c0, int64_t c1) {
    const ChannelRange r{c, l, c0, c1};
    ArrayXd sum = ArrayXd::Zero(r.size());
    for (int64_t s = 0; s < n; ++s) sum += r.block<T>(x, s).rowwise().sum();
    const ArrayXd mean = sum / m;
    ArrayXd sq = ArrayXd::Zero(r.size());  // two passes: Σ (x - mean)² is exact-er than Σx²
    for (int64_t s = 0; s < n; ++s) {
      sq += (r.block<T>(x, s).colwise() - mean).square().rowwise().sum();
    }
    const ArrayXd invstd = (sq / m + eps).rsqrt();  // biased variance, like torch
    const ArrayXd scale = invstd * r.param<T>(gamma, 1.0);
    affine<T>(x, scale, r.param<T>(beta, 0.0) - mean * scale, n, r, y);
    Vec<T>(mean_out.data<T>() + c0, r.size()) = mean.cast<T>();
    Vec<T>(invstd_out.data<T>() + c0, r.size()) = invstd.cast<T>();
  });
}

template <class T>
void eval_typed(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                const Tensor& running_mean, const Tensor& running_var, double eps, int64_t n,
                int64_t c, int64_t l, Tensor& y) {
  parallel_for(c, n * l, [&](int64_t c0, int64_t c1) {
    const ChannelRange r{c, l, c0, c1};
    const ArrayXd scale = (r.param<T>(running_var, 0.0) + eps).rsqrt() * r.param<T>(gamma, 1.0);
    const ArrayXd shift = r.param<T>(beta, 0.0) - r.param<T>(running_mean, 0.0) * scale;
    affine<T>(x, scale, shift, n, r, y);
  });
}

template <class T>
void backward_typed(const Tensor& grad_y, const Tensor& x, const Tensor& gamma,
                    const Tensor& mean_t, const Tensor& invstd_t, int64_t n, int64_t c,
                    int64_t l, Tensor& grad_x, Tensor& grad_gamma, Tensor& grad_beta) {
  const double m = static_cast<double>(n * l);
  parallel_for(c, 2 * n * l, [&](int64_t c0, int64_t c1) {
    const ChannelRange r{c, l, c0, c1};
    const ArrayXd mean = r.param<T>(mean_t, 0.0), invstd = r.param<T>(invstd_t, 0.0);
    auto x_hat = [&](int64_t s) { return (r.block<T>(x, s).colwise() - mean).colwise() * invstd; };
    ArrayXd sum_g = ArrayXd::Zero(r.size()), sum_g_xhat = ArrayXd::Zero(r.size());
    for (int64_t s = 0; s < n; ++s) {
      sum_g += r.block<T>(grad_y, s).rowwise().sum();
      sum_g_xhat += (r.block<T>(grad_y, s) * x_hat(s)).rowwise().sum();
    }
    if (grad_beta.defined()) Vec<T>(grad_beta.data<T>() + c0, r.size()) = sum_g.cast<T>();
    if (grad_gamma.defined()) Vec<T>(grad_gamma.data<T>() + c0, r.size()) = sum_g_xhat.cast<T>();
    if (!grad_x.defined()) return;
    // grad_x = gamma * invstd / M * (M g - Σg - x̂ Σ g x̂)
    const ArrayXd k = r.param<T>(gamma, 1.0) * invstd / m;
    for (int64_t s = 0; s < n; ++s) {
      r.block_out<T>(grad_x, s) =
          (((r.block<T>(grad_y, s) * m).colwise() - sum_g - (x_hat(s).colwise() * sum_g_xhat))
               .colwise() * k)
              .template cast<T>();
    }
  });
}

}  // namespace

void batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                      int64_t n, int64_t c, int64_t l, Tensor& y, Tensor& mean, Tensor& invstd) {
  dispatch_floating(x.dtype(), "batch_norm_train", [&](auto zero) {
    train_typed<decltype(zero)>(x, gamma, beta, eps, n, c, l, y, mean, invstd);
  });
}

void batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                     const Tensor& running_mean, const Tensor& running_var, double eps,
                     int64_t n, int64_t c, int64_t l, Tensor& y) {
  dispatch_floating(x.dtype(), "batch_norm_eval", [&](auto zero) {
    eval_typed<decltype(zero)>(x, gamma, beta, running_mean, running_var, eps, n, c, l, y);
  });
}

void batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& gamma,
                         const Tensor& mean, const Tensor& invstd, int64_t n, int64_t c,
                         int64_t l, Tensor& grad_x, Tensor& grad_gamma, Tensor& grad_beta) {
  dispatch_floating(x.dtype(), "batch_norm_backward", [&](auto zero) {
    backward_typed<decltype(zero)>(grad_y, x, gamma, mean, invstd, n, c, l, grad_x, grad_gamma,
                                   grad_beta);
  });
}

}  // namespace pipewright::cpu
