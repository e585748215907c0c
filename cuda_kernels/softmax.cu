// Softmax and log-softmax over the last dim, and their backward.
//
// Shape legend: x, y, grad, out [rows, cols] contiguous; one block per row (row_block(cols)
// threads, 32 to 512), threads striding along the row, block reductions for the row's max and
// sums (launch.cuh). Dtypes: float32 / float64.
//
//   forward:  m = max_j x_j;  s = Σ_j exp(x_j - m)
//             softmax: y_j = exp(x_j - m) / s      log-softmax: y_j = x_j - (m + log s)
//   backward: softmax:     gx_j = y_j * (g_j - Σ_k g_k y_k)
//             log-softmax: gx_j = g_j - exp(y_j) * Σ_k g_k
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

template <class T>
__global__ void softmax_kernel(const T* x, T* out, int64_t rows, int64_t cols, bool log_out) {
  __shared__ T shared[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T* yr = out + row * cols;
    T m = lowest<T>();
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = xr[j] > m ? xr[j] : m;
    m = block_max(m, shared);
    T s = T(0);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += exp(xr[j] - m);
    s = block_sum(s, shared);
    if (log_out) {
      const T shift = m + log(s);
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = xr[j] - shift;
    } else {
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = exp(xr[j] - m) / s;
    }
  }
}

template <class T>
__global__ void softmax_backward_kernel(const T* grad, const T* y, T* out, int64_t rows,
                                        int64_t cols, bool log_out) {
  __shared__ T shared[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* g = grad + row * cols;
    const T* yr = y + row * cols;
    T* o = out + row * cols;
    T dot = T(0);  // Σ g (log-softmax) or Σ g*y (softmax)
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dot += log_out ? g[j] : g[j] * yr[j];
    dot = block_sum(dot, shared);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      o[j] = log_out ? g[j] - exp(yr[j]) * dot : yr[j] * (g[j] - dot);
    }
  }
}

}  // namespace

void softmax(const Tensor& x, bool log, Tensor& out) {
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0 || cols == 0) return;
  LaunchContext ctx(out);
  dispatch_floating(x.dtype(), "softmax", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(softmax_kernel<T>, row_grid(rows), row_block(cols), 0, ctx.stream)(
        x.data<T>(), out.data<T>(), rows, cols, log);
  });
  PW_CUDA_CHECK_LAUNCH("softmax_kernel");
}

void softmax_backward(const Tensor& grad, const Tensor& y, bool log, Tensor& out) {
  const int64_t rows = grad.size(0), cols = grad.size(1);
  if (rows == 0 || cols == 0) return;
  LaunchContext ctx(out);
  dispatch_floating(grad.dtype(), "softmax_backward", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(softmax_backward_kernel<T>, row_grid(rows), row_block(cols), 0, ctx.stream)(
        grad.data<T>(), y.data<T>(), out.data<T>(), rows, cols, log);
  });
  PW_CUDA_CHECK_LAUNCH("softmax_backward_kernel");
}

}  // namespace pipewright::cuda
