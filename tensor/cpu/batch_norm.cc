// BatchNorm over channels. Shape legend: x, y, grad [N, C, L] contiguous (L = 1 for 2-D input,
// the spatial size otherwise); gamma, beta, mean, invstd, running stats [C]; M = N * L values
// per channel. Formulas: tensor/kernels.h.
//
// Note [BatchNorm loop order]
// Every pass walks memory in address order: samples outer, then channels, then positions.
// - L = 1 (BatchNorm1d on [N, C], the MLP case): a sample's channels are one contiguous row,
//   so the inner loop runs over channels, each adding into its own double accumulator in an
//   array. No sum is carried from one iteration to the next, so the loop vectorises without
//   reassociating any sum.
// - L > 1: a (sample, channel) pair is a contiguous run of L values, summed by run_sum into
//   8 interleaved partial sums (vectorises), combined in a fixed order, then added to the
//   channel's accumulator.
// Threads split the channels (parallel_for): a thread owns the accumulators of its channels
// [c0, c1), and each channel's sum is taken in the same order whatever the number of threads,
// so results are bitwise identical for any thread count. Sums and the per-element arithmetic
// are in double whatever the tensor dtype (one rounding to the dtype per output).
#include <array>
#include <cmath>
#include <vector>

#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"
#include "tensor/graph.h"

namespace pipewright::cpu {
namespace {

/// The [N, C, L] layout and one thread's channels [c0, c1); i = channel - c0.
struct Range {
  int64_t n, c, l, c0, c1;
  int64_t size() const { return c1 - c0; }
  /// Offset of element (sample s, channel c0 + i, position 0).
  int64_t offset(int64_t s, int64_t i) const { return (s * c + c0 + i) * l; }
};

/// Per-channel tensor t [C] over the range's channels, as double; `fallback` when t is
/// undefined (affine = false).
template <class T>
std::vector<double> param(const Tensor& t, const Range& r, double fallback) {
  if (!t.defined()) return std::vector<double>(r.size(), fallback);
  const T* p = t.data<T>() + r.c0;
  return std::vector<double>(p, p + r.size());
}

template <class T>
void store(const std::vector<double>& v, const Range& r, const Tensor& t) {
  T* p = t.data<T>() + r.c0;
  for (int64_t i = 0; i < r.size(); ++i) p[i] = static_cast<T>(v[i]);
}

/// Σ_{j < l} f(j) in a fixed order: 8 interleaved partial sums (so the loop vectorises
/// without -ffast-math), combined pairwise, then the tail.
template <size_t K, class F>
std::array<double, K> run_sum(int64_t l, const F& f) {
  double part[K][8] = {};
  int64_t j = 0;
  for (; j + 8 <= l; j += 8) {
    for (int q = 0; q < 8; ++q) {
      const std::array<double, K> v = f(j + q);
      for (size_t t = 0; t < K; ++t) part[t][q] += v[t];
    }
  }
  std::array<double, K> total;
  for (size_t t = 0; t < K; ++t) {
    const double* p = part[t];
    total[t] = ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
  }
  for (; j < l; ++j) {
    const std::array<double, K> v = f(j);
    for (size_t t = 0; t < K; ++t) total[t] += v[t];
  }
  return total;
}

/// K per-channel sums over the range: sums[t][i] += Σ_{s, j} f(k, i)[t], k the offset of
/// element (s, c0 + i, j). Note [BatchNorm loop order].
template <size_t K, class F>
void channel_sums(const Range& r, std::array<double*, K> sums, const F& f) {
  if (r.l == 1) {
    for (int64_t s = 0; s < r.n; ++s) {
      const int64_t base = r.offset(s, 0);
      for (int64_t i = 0; i < r.size(); ++i) {
        const std::array<double, K> v = f(base + i, i);
        for (size_t t = 0; t < K; ++t) sums[t][i] += v[t];
      }
    }
    return;
  }
  for (int64_t s = 0; s < r.n; ++s) {
    for (int64_t i = 0; i < r.size(); ++i) {
      const int64_t base = r.offset(s, i);
      const std::array<double, K> v = run_sum<K>(r.l, [&](int64_t j) { return f(base + j, i); });
      for (size_t t = 0; t < K; ++t) sums[t][i] += v[t];
    }
  }
}

/// out[k] = f(k, i) rounded to T, for every element k of the range (channel c0 + i).
template <class T, class F>
void channel_map(const Range& r, T* out, const F& f) {
  if (r.l == 1) {
    for (int64_t s = 0; s < r.n; ++s) {
      const int64_t base = r.offset(s, 0);
      for (int64_t i = 0; i < r.size(); ++i) out[base + i] = static_cast<T>(f(base + i, i));
    }
    return;
  }
  for (int64_t s = 0; s < r.n; ++s) {
    for (int64_t i = 0; i < r.size(); ++i) {
      const int64_t base = r.offset(s, i);
      for (int64_t j = 0; j < r.l; ++j) out[base + j] = static_cast<T>(f(base + j, i));
    }
  }
}

/// y = x * scale + shift per channel.
template <class T>
void affine(const T* x, const std::vector<double>& scale, const std::vector<double>& shift,
            const Range& r, T* y) {
  const double* a = scale.data();
  const double* b = shift.data();
  channel_map(r, y, [x, a, b](int64_t k, int64_t i) {
    return static_cast<double>(x[k]) * a[i] + b[i];
  });
}

template <class T>
void train_typed(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, int64_t n,
                 int64_t c, int64_t l, Tensor& y, Tensor& mean_out, Tensor& invstd_out,
                 Tensor& var_out) {
  const double m = static_cast<double>(n * l);
  const T* xs = x.data<T>();
  parallel_for(c, n * l, [&](int64_t c0, int64_t c1) {
    const Range r{n, c, l, c0, c1};
    std::vector<double> mean(r.size(), 0.0), sq(r.size(), 0.0);
    channel_sums<1>(r, {mean.data()}, [xs](int64_t k, int64_t) {
      return std::array<double, 1>{static_cast<double>(xs[k])};
    });
    for (double& v : mean) v /= m;
    // Two passes: Σ (x - mean)² is more exact than Σ x² - M mean².
    const double* mu = mean.data();
    channel_sums<1>(r, {sq.data()}, [xs, mu](int64_t k, int64_t i) {
      const double d = static_cast<double>(xs[k]) - mu[i];
      return std::array<double, 1>{d * d};
    });
    std::vector<double> invstd(r.size()), scale = param<T>(gamma, r, 1.0),
                                          shift = param<T>(beta, r, 0.0);
    for (int64_t i = 0; i < r.size(); ++i) {
      sq[i] /= m;                              // biased variance, like torch
      invstd[i] = 1.0 / std::sqrt(sq[i] + eps);
      scale[i] *= invstd[i];
      shift[i] -= mean[i] * scale[i];
    }
    affine(xs, scale, shift, r, y.data<T>());
    store<T>(mean, r, mean_out);
    store<T>(invstd, r, invstd_out);
    if (var_out.defined()) store<double>(sq, r, var_out);
  });
}

template <class T>
void eval_typed(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                const Tensor& running_mean, const Tensor& running_var, double eps, int64_t n,
                int64_t c, int64_t l, Tensor& y) {
  parallel_for(c, n * l, [&](int64_t c0, int64_t c1) {
    const Range r{n, c, l, c0, c1};
    std::vector<double> scale = param<T>(gamma, r, 1.0), shift = param<T>(beta, r, 0.0);
    const std::vector<double> rm = param<T>(running_mean, r, 0.0),
                              rv = param<T>(running_var, r, 0.0);
    for (int64_t i = 0; i < r.size(); ++i) {
      scale[i] *= 1.0 / std::sqrt(rv[i] + eps);
      shift[i] -= rm[i] * scale[i];
    }
    affine(x.data<T>(), scale, shift, r, y.data<T>());
  });
}

template <class T>
void backward_typed(const Tensor& grad_y, const Tensor& x, const Tensor& gamma,
                    const Tensor& mean_t, const Tensor& invstd_t, int64_t n, int64_t c,
                    int64_t l, Tensor& grad_x, Tensor& grad_gamma, Tensor& grad_beta) {
  const double m = static_cast<double>(n * l);
  const T* xs = x.data<T>();
  const T* gs = grad_y.data<T>();
  parallel_for(c, 2 * n * l, [&](int64_t c0, int64_t c1) {
    const Range r{n, c, l, c0, c1};
    const std::vector<double> mean = param<T>(mean_t, r, 0.0), invstd = param<T>(invstd_t, r, 0.0);
    // One pass for both sums: Σ g and Σ g (x - mean); Σ g x̂ = invstd Σ g (x - mean).
    std::vector<double> sum_g(r.size(), 0.0), sum_g_xhat(r.size(), 0.0);
    const double* mu = mean.data();
    channel_sums<2>(r, {sum_g.data(), sum_g_xhat.data()}, [xs, gs, mu](int64_t k, int64_t i) {
      const double g = gs[k];
      return std::array<double, 2>{g, g * (static_cast<double>(xs[k]) - mu[i])};
    });
    // With M = 0 the sums are empty and the training statistics NaN: Σ g x̂ is the empty
    // sum, 0 (kernels.h; PyTorch gives zeros), not NaN * 0.
    if (n * l > 0) {
      for (int64_t i = 0; i < r.size(); ++i) sum_g_xhat[i] *= invstd[i];
    }
    if (grad_beta.defined()) store<T>(sum_g, r, grad_beta);
    if (grad_gamma.defined()) store<T>(sum_g_xhat, r, grad_gamma);
    if (!grad_x.defined()) return;
    // grad_x = gamma invstd / M (M g - Σ g - x̂ Σ g x̂), with x̂ = (x - mean) invstd folded into
    // per-channel coefficients: grad_x = a g - b (x - mean) - d.
    std::vector<double> a = param<T>(gamma, r, 1.0), b(r.size()), d(r.size());
    for (int64_t i = 0; i < r.size(); ++i) {
      a[i] *= invstd[i];
      b[i] = a[i] / m * sum_g_xhat[i] * invstd[i];
      d[i] = a[i] / m * sum_g[i];
    }
    const double* pa = a.data();
    const double* pb = b.data();
    const double* pd = d.data();
    channel_map(r, grad_x.data<T>(), [xs, gs, mu, pa, pb, pd](int64_t k, int64_t i) {
      return pa[i] * gs[k] - pb[i] * (static_cast<double>(xs[k]) - mu[i]) - pd[i];
    });
  });
}

}  // namespace

void batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                      int64_t n, int64_t c, int64_t l, Tensor& y, Tensor& mean, Tensor& invstd,
                      Tensor& var) {
  dispatch_floating(x.dtype(), "batch_norm_train", [&](auto zero) {
    train_typed<decltype(zero)>(x, gamma, beta, eps, n, c, l, y, mean, invstd, var);
  });
}

void batch_norm_accumulate(const Tensor& mean, const Tensor& var, double count, double seen,
                           Tensor& acc_mean, Tensor& acc_m2) {
  const double n = seen + count;
  dispatch_floating(mean.dtype(), "batch_norm_accumulate", [&](auto zero) {
    using T = decltype(zero);
    const T* m = mean.data<T>();
    const double* v = var.data<double>();
    double* am = acc_mean.data<double>();
    double* m2 = acc_m2.data<double>();
    for (int64_t ch = 0; ch < mean.numel(); ++ch) {
      const double d = static_cast<double>(m[ch]) - am[ch];
      am[ch] += d * count / n;
      m2[ch] += v[ch] * count + d * d * seen * count / n;
    }
  });
}

void batch_norm_commit(const Tensor& mean, const Tensor& m2, double count, double momentum,
                       Tensor& running_mean, Tensor& running_var, Tensor& num_batches_tracked,
                       const void* gate) {
  if (gate_closed(gate)) return;  // a replayed step that failed
  int64_t* tracked = num_batches_tracked.data<int64_t>();
  const double f = momentum >= 0 ? momentum : 1.0 / static_cast<double>(*tracked + 1);
  const double unbiased = count > 1 ? count - 1 : count;
  dispatch_floating(running_mean.dtype(), "batch_norm_commit", [&](auto zero) {
    using T = decltype(zero);
    T* rm = running_mean.data<T>();
    T* rv = running_var.data<T>();
    for (int64_t ch = 0; ch < running_mean.numel(); ++ch) {
      rm[ch] =
          static_cast<T>((1.0 - f) * static_cast<double>(rm[ch]) + f * mean.data<double>()[ch]);
      rv[ch] = static_cast<T>((1.0 - f) * static_cast<double>(rv[ch]) +
                              f * m2.data<double>()[ch] / unbiased);
    }
  });
  *tracked += 1;
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
