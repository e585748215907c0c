// Reductions: sum / mean / max and argmax over the middle dim of x viewed as [outer, n, inner].
//
// Shape legend: x [outer, n, inner] contiguous, out [outer, inner]; element (o, k, i) is at
// x[(o * n + k) * inner + i].
//
// Two layouts, two kernels:
//   inner == 1 (a row reduction, e.g. sum over the last dim): one block per row; its threads
//     stride along the row (coalesced) and combine with a block reduction (tree order).
//   inner > 1 (e.g. sum over dim 0 of [N, C]): one thread per output column, looping over n;
//     neighbouring threads read neighbouring addresses (coalesced).
// Sums therefore round differently from the CPU's blocked sums: compare with a tolerance.
// Max propagates NaN. argmax returns the first maximum (lowest k among equal values), NaN
// counting as the maximum (torch.argmax), like the CPU. Dtypes: float32 / float64.
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

template <class T>
__device__ inline T max_nan(T a, T b) {
  return (b > a || b != b) ? b : a;
}

/// One block per row of n (inner == 1). blockDim.x: a multiple of 32.
template <class T>
__global__ void reduce_rows_kernel(const T* x, T* out, int64_t outer, int64_t n, bool is_max,
                                   T scale) {
  __shared__ T shared[32];
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const T* p = x + row * n;
    T acc = is_max ? lowest<T>() : T(0);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x)
      acc = is_max ? max_nan(acc, p[k]) : acc + p[k];
    acc = is_max ? block_max(acc, shared) : block_sum(acc, shared);
    if (threadIdx.x == 0) out[row] = is_max ? acc : acc * scale;
  }
}

/// One thread per output (o, i) (inner > 1).
template <class T>
__global__ void reduce_columns_kernel(const T* x, T* out, int64_t outer, int64_t n,
                                      int64_t inner, bool is_max, T scale) {
  PW_GRID_STRIDE_LOOP(j, outer * inner) {
    const T* p = x + (j / inner) * n * inner + j % inner;  // element k at p[k * inner]
    T acc = is_max ? lowest<T>() : T(0);
    for (int64_t k = 0; k < n; ++k) acc = is_max ? max_nan(acc, p[k * inner]) : acc + p[k * inner];
    out[j] = is_max ? acc : acc * scale;
  }
}

/// (value, index) of the better candidate: larger value, or equal value and lower index; NaN
/// counts as larger than any number (torch.argmax), the lower index among NaNs.
template <class T>
__device__ inline void better(T& v, int64_t& k, T other_v, int64_t other_k) {
  const bool v_nan = v != v, other_nan = other_v != other_v;
  if (other_nan ? (!v_nan || other_k < k)
                : (!v_nan && (other_v > v || (other_v == v && other_k < k)))) {
    v = other_v;
    k = other_k;
  }
}

template <class T>
__global__ void argmax_rows_kernel(const T* x, int64_t* out, int64_t outer, int64_t n) {
  __shared__ T shared_v[32];
  __shared__ int64_t shared_k[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const T* p = x + row * n;
    T v = lowest<T>();
    int64_t k = n;  // "none yet": loses every tie against a real index
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) better(v, k, p[j], j);
    for (int offset = 16; offset > 0; offset /= 2) {
      better(v, k, __shfl_down_sync(0xffffffffu, v, offset),
             __shfl_down_sync(0xffffffffu, k, offset));
    }
    __syncthreads();
    if (lane == 0) {
      shared_v[warp] = v;
      shared_k[warp] = k;
    }
    __syncthreads();
    if (warp == 0) {
      v = lane < warps ? shared_v[lane] : lowest<T>();
      k = lane < warps ? shared_k[lane] : n;
      for (int offset = 16; offset > 0; offset /= 2) {
        better(v, k, __shfl_down_sync(0xffffffffu, v, offset),
               __shfl_down_sync(0xffffffffu, k, offset));
      }
      // n == 0 cannot reach here (ops rejects an empty dim); all -inf picks index 0.
      if (lane == 0) out[row] = k == n ? 0 : k;
    }
  }
}

template <class T>
__global__ void argmax_columns_kernel(const T* x, int64_t* out, int64_t outer, int64_t n,
                                      int64_t inner) {
  PW_GRID_STRIDE_LOOP(j, outer * inner) {
    const T* p = x + (j / inner) * n * inner + j % inner;
    int64_t best = 0;
    for (int64_t k = 1; k < n && p[best * inner] == p[best * inner]; ++k) {  // a NaN ends it
      const T v = p[k * inner];
      if (v > p[best * inner] || v != v) best = k;  // strict: the first maximum wins
    }
    out[j] = best;
  }
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) {
  if (outer * inner == 0) return;
  LaunchContext ctx(out);
  const bool is_max = op == ReduceOp::kMax;
  dispatch_floating(x.dtype(), "reduce", [&](auto zero) {
    using T = decltype(zero);
    // kMean: the sum times 1/n (0 * inf = NaN for an empty dim, like torch.mean).
    const T scale = op == ReduceOp::kMean ? T(1) / static_cast<T>(n) : T(1);
    if (inner == 1) {
      PW_LAUNCH(reduce_rows_kernel<T>, row_grid(outer), row_block(n), 0, ctx.stream)(
          x.data<T>(), out.data<T>(), outer, n, is_max, scale);
    } else {
      PW_LAUNCH(reduce_columns_kernel<T>, grid_for(outer * inner), kBlock, 0, ctx.stream)(
          x.data<T>(), out.data<T>(), outer, n, inner, is_max, scale);
    }
  });
  PW_CUDA_CHECK_LAUNCH(inner == 1 ? "reduce_rows_kernel" : "reduce_columns_kernel");
}

void argmax(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) {
  if (outer * inner == 0) return;
  LaunchContext ctx(out);
  dispatch_floating(x.dtype(), "argmax", [&](auto zero) {
    using T = decltype(zero);
    if (inner == 1) {
      PW_LAUNCH(argmax_rows_kernel<T>, row_grid(outer), row_block(n), 0, ctx.stream)(
          x.data<T>(), out.data<int64_t>(), outer, n);
    } else {
      PW_LAUNCH(argmax_columns_kernel<T>, grid_for(outer * inner), kBlock, 0, ctx.stream)(
          x.data<T>(), out.data<int64_t>(), outer, n, inner);
    }
  });
  PW_CUDA_CHECK_LAUNCH(inner == 1 ? "argmax_rows_kernel" : "argmax_columns_kernel");
}

}  // namespace pipewright::cuda
