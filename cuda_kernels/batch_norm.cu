// BatchNorm: training forward, eval forward, training backward. Own kernels, not cuDNN
// (docs/cuda.md, "BatchNorm: own kernels vs cuDNN", says why and how to measure).
//
// Shape legend: x, y, grad_y, grad_x [N, C, L] contiguous (L = 1 for 2-D input [N, C]);
// gamma, beta, mean, invstd, running stats [C]; M = N * L values per channel.
//
// Launches per call: training forward 3 (sums, finalize, affine), backward 3 (sums, finalize,
// grad_x), eval 2 (coefficients, affine):
//
//   sums      per-channel sums of M values in double, split over a (channel groups) x (splits)
//             grid sized to the GPU's SMs; partial sums [2][splits][C] (batch_norm_sums.cuh).
//   finalize  one thread per channel adds the splits in order (deterministic, no atomics) and
//             turns the sums into the statistics, parameter gradients and the coefficients of
//             the elementwise pass.
//   affine / grad_x  one pass over the elements, V at a time (16-byte accesses when every
//             pointer is aligned and V divides C (L = 1) or L), no division per element:
//               L == 1: 2-D grid of units of V channels x row lanes; a thread keeps its
//                       channels' coefficients in registers and strides over rows;
//               L >  1: grid-stride over units, each thread walking (channel, position)
//                       incrementally (Note [Channel walk], batch_norm_sums.cuh).
//
// Formulas (coefficients in double, rounded once per output element):
//   train:    K = x[0, c, 0]; mean = K + Σ(x-K)/M; var = Σ(x-K)²/M - (Σ(x-K)/M)² (biased,
//             like torch; Note [Shifted sums]); invstd = 1/sqrt(var + eps);
//             y = x * (invstd γ) + (β - mean invstd γ)
//   eval:     y = x * (γ / sqrt(rv + eps)) + (β - rm γ / sqrt(rv + eps))
//   backward: grad_β = Σg;  grad_γ = Σ g x̂ = invstd Σ g (x - mean) (0 when M = 0);
//             grad_x = γ invstd / M (M g - Σg - x̂ Σ g x̂) = a g - b (x - mean) - d with
//             a = γ invstd, b = a invstd Σ g x̂ / M, d = a Σg / M
// M = 0 gives NaN statistics and zero parameter gradients, like the CPU kernels.
// Dtypes: float32 / float64.
//
// Note [Shifted sums]: one pass of Σ(x-K) and Σ(x-K)² replaces the two passes mean, then
// Σ(x-mean)², saving a read of x. Shifting by a value of the channel keeps the subtraction
// mild: its relative rounding is about eps_double (1 + (mean-K)²/var), and K is one of the
// values, a few standard deviations from the mean for any ordinary data.
#include "cuda_kernels/batch_norm_sums.cuh"
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/scratch.h"

namespace pipewright::cuda {
namespace {

using bn::Vec;

// Elementwise passes: Op::kBlocksPerSm blocks of 256 threads per SM (8 would fill it; the
// affine pass keeps its coefficients in the registers of 6 without spilling, grad_x in those
// of 4). The grid is that many blocks per SM, one wave (the
// kernels are bounded to the registers that lets fit), fewer for small inputs.

/// gamma[ch] as double, or `fallback` when the tensor is undefined (affine = false).
template <class T>
__device__ inline double param(const T* p, int64_t ch, double fallback) {
  return p == nullptr ? fallback : static_cast<double>(p[ch]);
}

// ---- per-channel coefficients of the elementwise passes ----

struct alignas(16) AffineCoef {  // y = x scale + shift
  double scale, shift;
};

struct alignas(16) GradCoef {  // grad_x = a g - b (x - mean) - d
  double mean, a, b, d;
};

// ---- finalize kernels (one thread per channel) ----

using bn::add_splits;

template <class T>
__global__ void train_finalize(const double* partial, int64_t splits, const T* x, int64_t l,
                               double m, const T* gamma, const T* beta, double eps, int64_t c,
                               AffineCoef* coef, T* mean_out, T* invstd_out, double* var_out) {
  PW_GRID_STRIDE_LOOP(ch, c) {
    const bn::Sums s = add_splits(partial, splits, c, ch);
    const double shift = s.a / m;  // mean - K; NaN when M = 0
    const double mean = (m > 0 ? static_cast<double>(x[ch * l]) : 0.0) + shift;
    double var = s.b / m - shift * shift;
    var = var < 0.0 ? 0.0 : var;  // rounding of a constant channel; NaN stays NaN
    const double invstd = 1.0 / sqrt(var + eps);
    const double k = invstd * param(gamma, ch, 1.0);
    coef[ch] = {k, param(beta, ch, 0.0) - mean * k};
    mean_out[ch] = static_cast<T>(mean);
    invstd_out[ch] = static_cast<T>(invstd);
    if (var_out != nullptr) var_out[ch] = var;
  }
}

template <class T>
__global__ void eval_coefficients(const T* running_mean, const T* running_var, const T* gamma,
                                  const T* beta, double eps, int64_t c, AffineCoef* coef) {
  PW_GRID_STRIDE_LOOP(ch, c) {
    const double k = 1.0 / sqrt(param(running_var, ch, 0.0) + eps) * param(gamma, ch, 1.0);
    coef[ch] = {k, param(beta, ch, 0.0) - param(running_mean, ch, 0.0) * k};
  }
}

template <class T>
__global__ void backward_finalize(const double* partial, int64_t splits, const T* gamma,
                                  const T* mean, const T* invstd, double m, int64_t c,
                                  T* grad_gamma, T* grad_beta, GradCoef* coef) {
  PW_GRID_STRIDE_LOOP(ch, c) {
    const bn::Sums s = add_splits(partial, splits, c, ch);
    const double inv = static_cast<double>(invstd[ch]);
    // With M = 0 the statistics are NaN and Σ g x̂ is the empty sum, 0 (like the CPU).
    const double sum_g_xhat = m > 0 ? s.b * inv : 0.0;
    if (grad_beta != nullptr) grad_beta[ch] = static_cast<T>(s.a);
    if (grad_gamma != nullptr) grad_gamma[ch] = static_cast<T>(sum_g_xhat);
    if (coef != nullptr) {
      const double a = param(gamma, ch, 1.0) * inv;
      coef[ch] = {static_cast<double>(mean[ch]), a, a / m * sum_g_xhat * inv, a / m * s.a};
    }
  }
}

// ---- elementwise passes ----

/// y = x scale + shift, V elements of one unit; k[i]: lane i's coefficients.
template <class T, int V>
struct Affine {
  using Coef = AffineCoef;
  static constexpr int kBlocksPerSm = 6;
  const T* x;
  const Coef* coef;
  T* y;
  __device__ void operator()(int64_t unit, const Coef* k) const {
    const Vec<T, V> xv = bn::load<V>(x, unit);
    Vec<T, V> out;
    for (int i = 0; i < V; ++i) {
      out.v[i] = static_cast<T>(static_cast<double>(xv.v[i]) * k[i].scale + k[i].shift);
    }
    bn::store<V>(y, unit, out);
  }
};

/// grad_x = a g - b (x - mean) - d.
template <class T, int V>
struct GradX {
  using Coef = GradCoef;
  static constexpr int kBlocksPerSm = 4;
  const T* g;
  const T* x;
  const Coef* coef;
  T* grad_x;
  __device__ void operator()(int64_t unit, const Coef* k) const {
    const Vec<T, V> gv = bn::load<V>(g, unit), xv = bn::load<V>(x, unit);
    Vec<T, V> out;
    for (int i = 0; i < V; ++i) {
      out.v[i] = static_cast<T>(k[i].a * static_cast<double>(gv.v[i]) -
                                k[i].b * (static_cast<double>(xv.v[i]) - k[i].mean) - k[i].d);
    }
    bn::store<V>(grad_x, unit, out);
  }
};

/// L == 1: thread (x, y) of the 2-D grid owns unit u (channels V u .. V u + V - 1) and strides
/// over the rows.
template <int V, class Op>
__global__ void __launch_bounds__(kBlock, Op::kBlocksPerSm)
    rows_pass(Op op, int64_t n, int64_t units) {
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    typename Op::Coef k[V];
    for (int i = 0; i < V; ++i) k[i] = op.coef[u * V + i];
    for (int64_t row = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; row < n;
         row += static_cast<int64_t>(gridDim.y) * blockDim.y) {
      op(row * units + u, k);
    }
  }
}

/// L > 1: grid-stride over the units, walking (channel, position in the run of `run` units)
/// without dividing per element (Note [Channel walk]).
template <int V, class Op>
__global__ void __launch_bounds__(kBlock, Op::kBlocksPerSm)
    runs_pass(Op op, int64_t total_units, int64_t c, int64_t run) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t step_channels = step / run % c, step_pos = step % run;
  int64_t ch = first / run % c, pos = first % run;
  for (int64_t u = first; u < total_units; u += step) {
    typename Op::Coef k[V];
    k[0] = op.coef[ch];
    for (int i = 1; i < V; ++i) k[i] = k[0];
    op(u, k);
    pos += step_pos;
    ch += step_channels;
    if (pos >= run) {
      pos -= run;
      ++ch;
    }
    if (ch >= c) ch -= c;  // ch < 2c here: step_channels < c, plus at most 1
  }
}

/// Launches the elementwise pass `op` of width V over [n, c, l].
template <int V, class Op>
void launch_pass(const Op& op, int64_t n, int64_t c, int64_t l, int device, const char* name,
                 cudaStream_t stream) {
  const int64_t fill = int64_t{Op::kBlocksPerSm} * multiprocessor_count(device);
  const int64_t cap = launch_limits().max_grid;
  if (l == 1) {
    const int64_t units = c / V;
    int lanes = 1;
    while (lanes < units && lanes < 32) lanes *= 2;
    const dim3 block(lanes, kBlock / lanes);
    int64_t gx = (units + lanes - 1) / lanes, gy = (n + block.y - 1) / block.y;
    gx = gx < cap ? gx : cap;
    const int64_t want_y = (fill + gx - 1) / gx;
    gy = gy < want_y ? gy : want_y;
    gy = gy < cap ? gy : cap;
    gy = gy < 65535 ? gy : 65535;  // gridDim.y
    PW_LAUNCH((rows_pass<V, Op>), dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)),
              block, 0, stream)(op, n, units);
  } else {
    const int64_t units = n * c * l / V;
    const int64_t blocks = grid_for(units) < fill ? grid_for(units) : fill;
    PW_LAUNCH((runs_pass<V, Op>), static_cast<unsigned>(blocks), kBlock, 0, stream)(
        op, units, c, l / V);
  }
  PW_CUDA_CHECK_LAUNCH(name);
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

/// The run V must divide: C for [N, C], L otherwise.
int64_t vector_run(int64_t c, int64_t l) { return l == 1 ? c : l; }

}  // namespace

void batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                      int64_t n, int64_t c, int64_t l, Tensor& y, Tensor& mean, Tensor& invstd,
                      Tensor& var) {
  if (c == 0) return;
  LaunchContext ctx(y);
  const int device = y.device().index;
  const double m = static_cast<double>(n * l);  // M = 0 gives NaN statistics, like the CPU
  Scratch<AffineCoef> coef(y.device(), c, ctx.stream);
  dispatch_floating(x.dtype(), "batch_norm_train", [&](auto zero) {
    using T = decltype(zero);
    const int width = bn::vector_width<T>(vector_run(c, l), {x.data<T>(), y.data<T>()});
    bn::dispatch_width<T>(width, [&](auto v) {
      constexpr int V = decltype(v)::value;
      const bn::SumsPlan plan = bn::plan_sums(n, c, l, V, device);
      Scratch<double> partial(y.device(), 2 * plan.splits * c, ctx.stream);
      bn::launch_sums<V>(bn::ShiftedMoments<T, V>{x.data<T>(), l}, plan, n, c, l,
                         partial.get(), ctx.stream);
      PW_LAUNCH(train_finalize<T>, grid_for(c), kBlock, 0, ctx.stream)(
          partial.get(), plan.splits, x.data<T>(), l, m, optional<T>(gamma), optional<T>(beta),
          eps, c, coef.get(), mean.data<T>(), invstd.data<T>(), optional_out<double>(var));
      PW_CUDA_CHECK_LAUNCH("train_finalize");
      if (n * l == 0) return;
      launch_pass<V>(Affine<T, V>{x.data<T>(), coef.get(), y.data<T>()}, n, c, l, device,
                     "affine", ctx.stream);
    });
  });
}

void batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                     const Tensor& running_mean, const Tensor& running_var, double eps,
                     int64_t n, int64_t c, int64_t l, Tensor& y) {
  if (n * c * l == 0) return;
  LaunchContext ctx(y);
  Scratch<AffineCoef> coef(y.device(), c, ctx.stream);
  dispatch_floating(x.dtype(), "batch_norm_eval", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(eval_coefficients<T>, grid_for(c), kBlock, 0, ctx.stream)(
        optional<T>(running_mean), optional<T>(running_var), optional<T>(gamma),
        optional<T>(beta), eps, c, coef.get());
    PW_CUDA_CHECK_LAUNCH("eval_coefficients");
    const int width = bn::vector_width<T>(vector_run(c, l), {x.data<T>(), y.data<T>()});
    bn::dispatch_width<T>(width, [&](auto v) {
      constexpr int V = decltype(v)::value;
      launch_pass<V>(Affine<T, V>{x.data<T>(), coef.get(), y.data<T>()}, n, c, l,
                     y.device().index, "affine", ctx.stream);
    });
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
  const int device = any_out.device().index;
  const bool want_x = grad_x.defined() && n * l > 0;
  Scratch<GradCoef> coef(any_out.device(), want_x ? c : 0, ctx.stream);
  dispatch_floating(x.dtype(), "batch_norm_backward", [&](auto zero) {
    using T = decltype(zero);
    const T* g = grad_y.data<T>();
    const T* xs = x.data<T>();
    T* gx = want_x ? grad_x.data<T>() : nullptr;
    const int width = bn::vector_width<T>(vector_run(c, l), {g, xs, gx});
    bn::dispatch_width<T>(width, [&](auto v) {
      constexpr int V = decltype(v)::value;
      const bn::SumsPlan plan = bn::plan_sums(n, c, l, V, device);
      Scratch<double> partial(any_out.device(), 2 * plan.splits * c, ctx.stream);
      bn::launch_sums<V>(bn::GradientMoments<T, V>{g, xs, mean.data<T>()}, plan, n, c, l,
                         partial.get(), ctx.stream);
      PW_LAUNCH(backward_finalize<T>, grid_for(c), kBlock, 0, ctx.stream)(
          partial.get(), plan.splits, optional<T>(gamma), mean.data<T>(), invstd.data<T>(),
          static_cast<double>(n * l), c, optional_out<T>(grad_gamma), optional_out<T>(grad_beta),
          want_x ? coef.get() : nullptr);
      PW_CUDA_CHECK_LAUNCH("backward_finalize");
      if (!want_x) return;
      launch_pass<V>(GradX<T, V>{g, xs, coef.get(), gx}, n, c, l, device, "grad_x", ctx.stream);
    });
  });
}

}  // namespace pipewright::cuda
