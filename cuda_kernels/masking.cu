// Masking kernels: masked_fill, triangular (tril / triu), causal_softmax and its backward.
//
// Shape legend: B = matrices, L = rows (queries), S = columns (keys); x, y, grad, out
// [B, L, S] contiguous. Row r of the stack is query i = r % L, which sees keys j < len =
// min(i + 1, S). masked_fill and triangular: one thread per element (grid-stride); the
// softmaxes: one block per row (row_block(S) threads), block reductions (launch.cuh), like
// softmax.cu. Dtypes: float32 / float64 (masked_fill and triangular also int64; the mask of
// masked_fill any dtype).
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

template <class T, class M>
__global__ void masked_fill_kernel(const T* x, const M* mask, T value, T* out, int64_t n,
                                   int64_t period) {
  PW_GRID_STRIDE_LOOP(i, n) { out[i] = mask[i % period] != M(0) ? value : x[i]; }
}

template <class T>
__global__ void triangular_kernel(const T* x, T* out, int64_t n, int64_t rows, int64_t cols,
                                  int64_t diagonal, bool upper) {
  PW_GRID_STRIDE_LOOP(e, n) {
    const int64_t j = e % cols, i = (e / cols) % rows;
    const bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
    out[e] = keep ? x[e] : T(0);
  }
}

template <class T>
__global__ void causal_softmax_kernel(const T* x, T* out, int64_t total, int64_t rows,
                                      int64_t cols, T scale) {
  __shared__ T shared[32];
  for (int64_t r = blockIdx.x; r < total; r += gridDim.x) {
    const int64_t len = r % rows + 1 < cols ? r % rows + 1 : cols;
    const T* xr = x + r * cols;
    T* yr = out + r * cols;
    T m = lowest<T>();
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const T v = xr[j] * scale;
      m = v > m ? v : m;
    }
    m = block_max(m, shared);
    T s = T(0);
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) s += exp(xr[j] * scale - m);
    s = block_sum(s, shared);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      yr[j] = j < len ? exp(xr[j] * scale - m) / s : T(0);
    }
  }
}

template <class T>
__global__ void causal_softmax_backward_kernel(const T* grad, const T* y, T* out, int64_t total,
                                               int64_t rows, int64_t cols, T scale) {
  __shared__ T shared[32];
  for (int64_t r = blockIdx.x; r < total; r += gridDim.x) {
    const int64_t len = r % rows + 1 < cols ? r % rows + 1 : cols;
    const T* g = grad + r * cols;
    const T* yr = y + r * cols;
    T* o = out + r * cols;
    T dot = T(0);
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) dot += g[j] * yr[j];
    dot = block_sum(dot, shared);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      o[j] = j < len ? scale * yr[j] * (g[j] - dot) : T(0);
    }
  }
}

}  // namespace

void masked_fill(const Tensor& x, const Tensor& mask, double value, Tensor& out) {
  const int64_t n = x.numel(), period = mask.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  dispatch_all(x.dtype(), "masked_fill", [&](auto x_zero) {
    dispatch_all(mask.dtype(), "masked_fill", [&](auto mask_zero) {
      using T = decltype(x_zero);
      using M = decltype(mask_zero);
      PW_LAUNCH((masked_fill_kernel<T, M>), grid_for(n), kBlock, 0, ctx.stream)(
          x.data<T>(), mask.data<M>(), static_cast<T>(value), out.data<T>(), n, period);
    });
  });
  PW_CUDA_CHECK_LAUNCH("masked_fill_kernel");
}

void triangular(const Tensor& x, int64_t diagonal, bool upper, Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  dispatch_all(x.dtype(), "triangular", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(triangular_kernel<T>, grid_for(n), kBlock, 0, ctx.stream)(
        x.data<T>(), out.data<T>(), n, x.size(1), x.size(2), diagonal, upper);
  });
  PW_CUDA_CHECK_LAUNCH("triangular_kernel");
}

void causal_softmax(const Tensor& x, double scale, Tensor& out) {
  const int64_t rows = x.size(1), cols = x.size(2), total = x.size(0) * rows;
  if (total == 0 || cols == 0) return;
  LaunchContext ctx(out);
  dispatch_floating(x.dtype(), "causal_softmax", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(causal_softmax_kernel<T>, row_grid(total), row_block(cols), 0, ctx.stream)(
        x.data<T>(), out.data<T>(), total, rows, cols, static_cast<T>(scale));
  });
  PW_CUDA_CHECK_LAUNCH("causal_softmax_kernel");
}

void causal_softmax_backward(const Tensor& grad, const Tensor& y, double scale, Tensor& out) {
  const int64_t rows = y.size(1), cols = y.size(2), total = y.size(0) * rows;
  if (total == 0 || cols == 0) return;
  LaunchContext ctx(out);
  dispatch_floating(y.dtype(), "causal_softmax_backward", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(causal_softmax_backward_kernel<T>, row_grid(total), row_block(cols), 0, ctx.stream)(
        grad.data<T>(), y.data<T>(), out.data<T>(), total, rows, cols, static_cast<T>(scale));
  });
  PW_CUDA_CHECK_LAUNCH("causal_softmax_backward_kernel");
}

}  // namespace pipewright::cuda
