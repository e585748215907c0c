// LayerNorm / RMSNorm forward and backward, fused.
//
// Shape legend: x, y, grad_y, grad_x [rows, C]; weight, bias, grad_weight, grad_bias [C];
// mean, rstd [rows]. The forward and grad_x: one block per row (row_block(C) threads), block
// reductions for the row's sums (launch.cuh). grad_weight / grad_bias: column sums over the
// rows, in double, split over enough blocks to fill the GPU as BatchNorm's channel sums are
// (batch_norm_sums.cuh, NormWeightMoments: tiles of 32 column units × 8 row lanes, rows split
// into ranges), then one thread per column adds the splits in order and rounds once
// (deterministic, no atomics). One thread per column over every row, as before, left a GPU of
// 132 SMs with 24 warps for GPT-2's 768 columns, each walking all 16 K rows of a batch.
//
//   forward:  mean = Σ x / C (RMSNorm: 0),  rstd = 1/√(Σ (x - mean)² / C + eps),
//             y = (x - mean) · rstd · w + b
//   backward: x̂ = (x - mean) · rstd,  ĝ = g · w,
//             grad_x = rstd · (ĝ - mean(ĝ) - x̂ · mean(ĝ x̂))   (RMSNorm: no mean(ĝ) term)
//             grad_w = Σ_rows g x̂,  grad_b = Σ_rows g
// Dtypes: float32 / float64; weight, bias, mean may be null (absent).
#include "cuda_kernels/batch_norm_sums.cuh"
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"
#include "cuda_kernels/scratch.h"

namespace pipewright::cuda {
namespace {

template <class T>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T eps, int64_t rows,
                                  int64_t cols, T* y, T* mean, T* rstd) {
  __shared__ T shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T mu = T(0);
    if (mean != nullptr) {
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) mu += xr[j];
      mu = block_sum(mu, shared) / T(cols);
    }
    T var = T(0);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) var += (xr[j] - mu) * (xr[j] - mu);
    const T s = T(1) / sqrt(block_sum(var, shared) / T(cols) + eps);
    if (threadIdx.x == 0) {
      if (mean != nullptr) mean[r] = mu;
      rstd[r] = s;
    }
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      T v = (xr[j] - mu) * s;
      if (w != nullptr) v *= w[j];
      if (b != nullptr) v += b[j];
      y[r * cols + j] = v;
    }
  }
}

template <class T>
__global__ void layer_norm_input_grad_kernel(const T* g, const T* x, const T* w, const T* mean,
                                             const T* rstd, int64_t rows, int64_t cols, T* gx) {
  __shared__ T shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* gr = g + r * cols;
    const T* xr = x + r * cols;
    const T mu = mean != nullptr ? mean[r] : T(0), s = rstd[r];
    T sum_gh = T(0), sum_ghx = T(0);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const T gh = w != nullptr ? gr[j] * w[j] : gr[j];
      sum_gh += gh;
      sum_ghx += gh * (xr[j] - mu) * s;
    }
    const T a = mean != nullptr ? block_sum(sum_gh, shared) / T(cols) : T(0);
    const T c = block_sum(sum_ghx, shared) / T(cols);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const T gh = w != nullptr ? gr[j] * w[j] : gr[j];
      gx[r * cols + j] = s * (gh - a - (xr[j] - mu) * s * c);
    }
  }
}

/// grad_w[j] = Σ_rows g x̂ and grad_b[j] = Σ_rows g from the splits' partial sums
/// partial[2][splits][cols] (bn::add_splits: split 0, 1, ... in order), rounded once.
template <class T>
__global__ void layer_norm_weight_grad_finalize(const double* partial, int64_t splits,
                                                int64_t cols, T* gw, T* gb) {
  PW_GRID_STRIDE_LOOP(j, cols) {
    const bn::Sums s = bn::add_splits(partial, splits, cols, j);
    if (gw != nullptr) gw[j] = static_cast<T>(s.a);
    if (gb != nullptr) gb[j] = static_cast<T>(s.b);
  }
}

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

template <class T>
T* out_or_null(Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool rms,
                Tensor& y, Tensor& mean, Tensor& rstd) {
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0) return;
  LaunchContext ctx(y);
  dispatch_floating(x.dtype(), "layer_norm", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(layer_norm_kernel<T>, row_grid(rows), row_block(cols), 0, ctx.stream)(
        x.data<T>(), data_or_null<T>(weight), data_or_null<T>(bias), static_cast<T>(eps), rows,
        cols, y.data<T>(), rms ? nullptr : mean.data<T>(), rstd.data<T>());
  });
  PW_CUDA_CHECK_LAUNCH("layer_norm_kernel");
}

void layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, bool rms, Tensor& grad_x,
                         Tensor& grad_weight, Tensor& grad_bias) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const Tensor& out = grad_x.defined() ? grad_x : grad_weight.defined() ? grad_weight : grad_bias;
  if (!out.defined() || cols == 0) return;
  LaunchContext ctx(out);
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto zero) {
    using T = decltype(zero);
    const T* mu = rms ? nullptr : mean.data<T>();
    if (grad_x.defined() && rows > 0) {
      PW_LAUNCH(layer_norm_input_grad_kernel<T>, row_grid(rows), row_block(cols), 0, ctx.stream)(
          grad_y.data<T>(), x.data<T>(), data_or_null<T>(weight), mu, rstd.data<T>(), rows, cols,
          grad_x.data<T>());
      PW_CUDA_CHECK_LAUNCH("layer_norm_input_grad_kernel");
    }
    if (grad_weight.defined() || grad_bias.defined()) {
      const T* g = grad_y.data<T>();
      const T* xs = x.data<T>();
      bn::dispatch_width<T>(bn::vector_width<T>(cols, {g, xs}), [&](auto v) {
        constexpr int V = decltype(v)::value;
        const bn::SumsPlan plan = bn::plan_sums(rows, cols, 1, V, out.device().index);
        // No rows: no splits, and the finalize writes the empty sums, zeros (as the CPU).
        Scratch<double> partial(out.device(), 2 * plan.splits * cols, ctx.stream);
        bn::launch_sums<V>(bn::NormWeightMoments<T, V>{g, xs, mu, rstd.data<T>(), cols / V},
                           plan, rows, cols, 1, partial.get(), ctx.stream);
        PW_LAUNCH(layer_norm_weight_grad_finalize<T>, grid_for(cols), kBlock, 0, ctx.stream)(
            partial.get(), plan.splits, cols, out_or_null<T>(grad_weight),
            out_or_null<T>(grad_bias));
        PW_CUDA_CHECK_LAUNCH("layer_norm_weight_grad_finalize");
      });
    }
  });
}

}  // namespace pipewright::cuda
