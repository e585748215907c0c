// BatchNorm: training forward, eval forward, training backward. Own kernels, not cuDNN
// (docs/cuda.md, "BatchNorm: own kernels vs cuDNN", says why and how to measure).
//
// Shape legend: x, y, grad_y, grad_x [N, C, L] contiguous (L = 1 for 2-D input [N, C]);
// gamma, beta, mean, invstd, running stats [C]; M = N * L values per channel. Element e of x
// belongs to channel (e / L) % C.
//
// Every call is (a) per-channel sums over M values, accumulated in double like the CPU
// kernel, (b) a tiny per-channel kernel turning sums into coefficients, (c) one elementwise
// pass applying them. The sums use one of two layouts:
//
//   L == 1 ([N, C]):  a block covers 32 channels x 8 row lanes; thread (tx, ty) sums rows
//                     ty, ty+8, ... of channel 32*block + tx, so a warp reads 32 neighbouring
//                     channels of one row (coalesced); shared memory adds the 8 row lanes.
//   L >  1:           one block per channel; its threads stride over the channel's N*L values,
//                     contiguous runs of L; a block reduction adds them.
// Both add in a fixed order (deterministic, no atomics).
//
//   train:    mean = Σx / M;  var = Σ(x - mean)² / M (two passes, biased, like torch);
//             invstd = 1/sqrt(var + eps);  y = x * (invstd γ) + (β - mean invstd γ)
//   eval:     y = x * (γ / sqrt(rv + eps)) + (β - rm γ / sqrt(rv + eps))
//   backward: x̂ = (x - mean) invstd;  grad_β = Σg;  grad_γ = Σ g x̂;
//             grad_x = γ invstd / M * (M g - Σg - x̂ Σ g x̂)
// Dtypes: float32 / float64 (coefficients in double, rounded once per output element).
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"
#include "cuda_kernels/scratch.h"

namespace pipewright::cuda {
namespace {

struct Sums {
  double a, b;
};

// ---- what to sum per element (e: flat index into [N, C, L], ch: its channel) ----

template <class T>
struct SumX {
  const T* x;
  __device__ Sums operator()(int64_t e, int64_t) const { return {static_cast<double>(x[e]), 0.0}; }
};

template <class T>
struct SumSquaredDeviation {
  const T* x;
  const double* mean;
  __device__ Sums operator()(int64_t e, int64_t ch) const {
    const double d = static_cast<double>(x[e]) - mean[ch];
    return {d * d, 0.0};
  }
};

template <class T>
struct SumGradients {  // (Σ g, Σ g x̂)
  const T* g;
  const T* x;
  const double* mean;
  const double* invstd;
  __device__ Sums operator()(int64_t e, int64_t ch) const {
    const double gd = static_cast<double>(g[e]);
    return {gd, gd * ((static_cast<double>(x[e]) - mean[ch]) * invstd[ch])};
  }
};

// ---- per-channel sums; out_a[ch] = Σ a / divisor, out_b[ch] = Σ b / divisor ----

constexpr int kTileChannels = 32, kTileRows = 8;

template <class Map>
__global__ void channel_sums_2d(Map map, int64_t n, int64_t c, double divisor, double* out_a,
                                double* out_b) {
  __shared__ double shared_a[kTileRows][kTileChannels + 1];  // +1: no bank conflicts
  __shared__ double shared_b[kTileRows][kTileChannels + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kTileChannels; base < c;
       base += static_cast<int64_t>(gridDim.x) * kTileChannels) {
    const int64_t ch = base + tx;
    Sums s{0.0, 0.0};
    if (ch < c) {
      for (int64_t row = ty; row < n; row += kTileRows) {
        const Sums v = map(row * c + ch, ch);
        s.a += v.a;
        s.b += v.b;
      }
    }
    shared_a[ty][tx] = s.a;
    shared_b[ty][tx] = s.b;
    __syncthreads();
    if (ty == 0 && ch < c) {
      double a = 0.0, b = 0.0;
      for (int r = 0; r < kTileRows; ++r) {
        a += shared_a[r][tx];
        b += shared_b[r][tx];
      }
      out_a[ch] = a / divisor;
      if (out_b != nullptr) out_b[ch] = b / divisor;
    }
    __syncthreads();
  }
}

template <class Map>
__global__ void channel_sums_3d(Map map, int64_t n, int64_t c, int64_t l, double divisor,
                                double* out_a, double* out_b) {
  __shared__ double shared[32];
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    Sums s{0.0, 0.0};
    for (int64_t j = threadIdx.x; j < n * l; j += blockDim.x) {
      const int64_t sample = j / l, pos = j % l;
      const Sums v = map((sample * c + ch) * l + pos, ch);
      s.a += v.a;
      s.b += v.b;
    }
    const double a = block_sum(s.a, shared);
    const double b = block_sum(s.b, shared);
    if (threadIdx.x == 0) {
      out_a[ch] = a / divisor;
      if (out_b != nullptr) out_b[ch] = b / divisor;
    }
  }
}

/// Launches the layout that suits l (see the file comment).
template <class Map>
void channel_sums(const Map& map, int64_t n, int64_t c, int64_t l, double divisor, double* out_a,
                  double* out_b, cudaStream_t stream) {
  if (l == 1) {
    const int64_t tiles = (c + kTileChannels - 1) / kTileChannels;
    PW_LAUNCH(channel_sums_2d<Map>, row_grid(tiles), dim3(kTileChannels, kTileRows), 0, stream)(
        map, n, c, divisor, out_a, out_b);
  } else {
    PW_LAUNCH(channel_sums_3d<Map>, row_grid(c), kBlock, 0, stream)(
        map, n, c, l, divisor, out_a, out_b);
  }
  PW_CUDA_CHECK_LAUNCH(l == 1 ? "channel_sums_2d" : "channel_sums_3d");
}

// ---- per-channel coefficients (one thread per channel) ----

/// gamma[ch] as double, or `fallback` when the tensor is undefined (affine = false).
template <class T>
__device__ inline double param(const T* p, int64_t ch, double fallback) {
  return p == nullptr ? fallback : static_cast<double>(p[ch]);
}

/// Training: var -> invstd; scale = invstd γ, shift = β - mean scale; mean/invstd to T.
template <class T>
__global__ void train_coefficients(const double* mean, const double* var, const T* gamma,
                                   const T* beta, double eps, int64_t c, double* scale,
                                   double* shift, T* mean_out, T* invstd_out) {
  PW_GRID_STRIDE_LOOP(ch, c) {
    const double invstd = 1.0 / sqrt(var[ch] + eps);
    const double k = invstd * param(gamma, ch, 1.0);
    scale[ch] = k;
    shift[ch] = param(beta, ch, 0.0) - mean[ch] * k;
    mean_out[ch] = static_cast<T>(mean[ch]);
    invstd_out[ch] = static_cast<T>(invstd);
  }
}

template <class T>
__global__ void eval_coefficients(const T* running_mean, const T* running_var, const T* gamma,
                                  const T* beta, double eps, int64_t c, double* scale,
                                  double* shift) {
  PW_GRID_STRIDE_LOOP(ch, c) {
    const double k = 1.0 / sqrt(param(running_var, ch, 0.0) + eps) * param(gamma, ch, 1.0);
    scale[ch] = k;
    shift[ch] = param(beta, ch, 0.0) - param(running_mean, ch, 0.0) * k;
  }
}

/// mean/invstd (T) as double, for the backward's x̂.
template <class T>
__global__ void to_double(const T* mean, const T* invstd, int64_t c, double* mean_d,
                          double* invstd_d) {
  PW_GRID_STRIDE_LOOP(ch, c) {
    mean_d[ch] = static_cast<double>(mean[ch]);
    invstd_d[ch] = static_cast<double>(invstd[ch]);
  }
}

template <class T>
__global__ void write_param_grads(const double* sum_g, const double* sum_g_xhat, int64_t c,
                                  T* grad_gamma, T* grad_beta) {
  PW_GRID_STRIDE_LOOP(ch, c) {
    if (grad_beta != nullptr) grad_beta[ch] = static_cast<T>(sum_g[ch]);
    if (grad_gamma != nullptr) grad_gamma[ch] = static_cast<T>(sum_g_xhat[ch]);
  }
}

// ---- elementwise passes ----

template <class T>
__global__ void affine_kernel(const T* x, const double* scale, const double* shift, T* y,
                              int64_t total, int64_t c, int64_t l) {
  PW_GRID_STRIDE_LOOP(e, total) {
    const int64_t ch = (e / l) % c;
    y[e] = static_cast<T>(static_cast<double>(x[e]) * scale[ch] + shift[ch]);
  }
}

template <class T>
__global__ void grad_x_kernel(const T* g, const T* x, const T* gamma, const double* mean,
                              const double* invstd, const double* sum_g,
                              const double* sum_g_xhat, T* grad_x, int64_t total, int64_t c,
                              int64_t l, double m) {
  PW_GRID_STRIDE_LOOP(e, total) {
    const int64_t ch = (e / l) % c;
    const double x_hat = (static_cast<double>(x[e]) - mean[ch]) * invstd[ch];
    const double k = param(gamma, ch, 1.0) * invstd[ch] / m;
    grad_x[e] =
        static_cast<T>((static_cast<double>(g[e]) * m - sum_g[ch] - x_hat * sum_g_xhat[ch]) * k);
  }
}

/// Data pointer of an optional [C] parameter: nullptr when undefined.
template <class T>
const T* optional(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <class T>
T* optional_out(Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

void batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                      int64_t n, int64_t c, int64_t l, Tensor& y, Tensor& mean, Tensor& invstd,
                      Tensor& var) {
  if (c == 0) return;
  LaunchContext ctx(y);
  const int64_t total = n * c * l;
  const double m = static_cast<double>(n * l);  // M = 0 gives NaN statistics, like the CPU
  Scratch<double> stats(y.device(), 4 * c, ctx.stream);   // mean | var | scale | shift
  double* mean_d = stats.get();
  // The double variance goes straight into `var` (float64 [C]) when the caller wants it.
  double* var_d = var.defined() ? var.data<double>() : mean_d + c;
  double* scale_d = mean_d + 2 * c;
  double* shift_d = scale_d + c;
  dispatch_floating(x.dtype(), "batch_norm_train", [&](auto zero) {
    using T = decltype(zero);
    channel_sums(SumX<T>{x.data<T>()}, n, c, l, m, mean_d, nullptr, ctx.stream);
    channel_sums(SumSquaredDeviation<T>{x.data<T>(), mean_d}, n, c, l, m, var_d, nullptr,
                 ctx.stream);
    PW_LAUNCH(train_coefficients<T>, grid_for(c), kBlock, 0, ctx.stream)(
        mean_d, var_d, optional<T>(gamma), optional<T>(beta), eps, c, scale_d, shift_d,
        mean.data<T>(), invstd.data<T>());
    PW_CUDA_CHECK_LAUNCH("train_coefficients");
    if (total == 0) return;
    PW_LAUNCH(affine_kernel<T>, grid_for(total), kBlock, 0, ctx.stream)(
        x.data<T>(), scale_d, shift_d, y.data<T>(), total, c, l);
    PW_CUDA_CHECK_LAUNCH("affine_kernel");
  });
}

void batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                     const Tensor& running_mean, const Tensor& running_var, double eps,
                     int64_t n, int64_t c, int64_t l, Tensor& y) {
  const int64_t total = n * c * l;
  if (total == 0) return;
  LaunchContext ctx(y);
  Scratch<double> coefficients(y.device(), 2 * c, ctx.stream);  // scale | shift
  double* scale_d = coefficients.get();
  double* shift_d = scale_d + c;
  dispatch_floating(x.dtype(), "batch_norm_eval", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(eval_coefficients<T>, grid_for(c), kBlock, 0, ctx.stream)(
        optional<T>(running_mean), optional<T>(running_var), optional<T>(gamma),
        optional<T>(beta), eps, c, scale_d, shift_d);
    PW_CUDA_CHECK_LAUNCH("eval_coefficients");
    PW_LAUNCH(affine_kernel<T>, grid_for(total), kBlock, 0, ctx.stream)(
        x.data<T>(), scale_d, shift_d, y.data<T>(), total, c, l);
    PW_CUDA_CHECK_LAUNCH("affine_kernel");
  });
}

void batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& gamma,
                         const Tensor& mean, const Tensor& invstd, int64_t n, int64_t c,
                         int64_t l, Tensor& grad_x, Tensor& grad_gamma, Tensor& grad_beta) {
  if (c == 0) return;
  const Tensor& any_out =
      grad_x.defined() ? grad_x : (grad_gamma.defined() ? grad_gamma : grad_beta);
  if (!any_out.defined()) return;  // no gradient wanted
  LaunchContext ctx(any_out);
  const int64_t total = n * c * l;
  Scratch<double> stats(any_out.device(), 4 * c, ctx.stream);  // mean | invstd | Σg | Σgx̂
  double* mean_d = stats.get();
  double* invstd_d = mean_d + c;
  double* sum_g = invstd_d + c;
  double* sum_g_xhat = sum_g + c;
  dispatch_floating(x.dtype(), "batch_norm_backward", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(to_double<T>, grid_for(c), kBlock, 0, ctx.stream)(
        mean.data<T>(), invstd.data<T>(), c, mean_d, invstd_d);
    PW_CUDA_CHECK_LAUNCH("to_double");
    channel_sums(SumGradients<T>{grad_y.data<T>(), x.data<T>(), mean_d, invstd_d}, n, c, l, 1.0,
                 sum_g, sum_g_xhat, ctx.stream);
    if (grad_gamma.defined() || grad_beta.defined()) {
      PW_LAUNCH(write_param_grads<T>, grid_for(c), kBlock, 0, ctx.stream)(
          sum_g, sum_g_xhat, c, optional_out<T>(grad_gamma), optional_out<T>(grad_beta));
      PW_CUDA_CHECK_LAUNCH("write_param_grads");
    }
    if (!grad_x.defined() || total == 0) return;
    PW_LAUNCH(grad_x_kernel<T>, grid_for(total), kBlock, 0, ctx.stream)(
        grad_y.data<T>(), x.data<T>(), optional<T>(gamma), mean_d, invstd_d, sum_g, sum_g_xhat,
        grad_x.data<T>(), total, c, l, static_cast<double>(n * l));
    PW_CUDA_CHECK_LAUNCH("grad_x_kernel");
  });
}

}  // namespace pipewright::cuda
