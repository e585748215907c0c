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
// Note [Split reductions]: a few long reductions would leave most of the GPU idle (a whole
// tensor's sum is one row: one block; the column sums of a [16 K, 768] gradient are 768
// threads, each walking 16 K rows). When the outputs' blocks would not fill the GPU
// (kBlocksPerSm per SM) and each part still gets enough values, the reduced dim is cut into
// `splits` equal ranges, each block (x: outputs, y: range) reducing one range; the same
// kernel then reduces the partial results [outer, splits] (rows) or [splits, outer · inner]
// (columns) as one range, applying mean's 1/n once. The split depends on the shape and the
// SM count only, so a reduction is deterministic on a given GPU.
// Sums therefore round differently from the CPU's blocked sums: compare with a tolerance.
// Max propagates NaN. argmax returns the first maximum (lowest k among equal values), NaN
// counting as the maximum (torch.argmax), like the CPU. Dtypes: float32 / float64.
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"
#include "cuda_kernels/scratch.h"

namespace pipewright::cuda {
namespace {

template <class T>
__device__ inline T max_nan(T a, T b) {
  return (b > a || b != b) ? b : a;
}

/// What a row reduction adds of each element (Note [Norm shares]): the element, its square
/// rounded to T (never fused with the sum into an FMA, so it equals the square kernel's), or
/// its magnitude.
enum class RowTerm { kValue, kSquare, kAbs };

template <RowTerm kRowTerm, class T>
__device__ inline T term_of(T v) {
  if constexpr (kRowTerm == RowTerm::kSquare) {
    if constexpr (std::is_same_v<T, float>) {
      return __fmul_rn(v, v);
    } else {
      return __dmul_rn(v, v);
    }
  }
  if constexpr (kRowTerm == RowTerm::kAbs) return fabs(v);
  return v;
}

/// One block per row of n (inner == 1), blockIdx.y taking elements [y · per_split, + per_split)
/// of it (Note [Split reductions]; one range when gridDim.y == 1): out [outer, gridDim.y].
/// blockDim.x: a multiple of 32. `kRowTerm` applies to x's elements; with `accumulate` set (one
/// row, one range) the sum is added to *accumulate in float64 instead of written to out.
template <class T, RowTerm kRowTerm>
__global__ void reduce_rows_kernel(const T* x, T* out, int64_t outer, int64_t n,
                                   int64_t per_split, bool is_max, T scale,
                                   double* accumulate) {
  __shared__ T shared[32];
  const int64_t begin = blockIdx.y * per_split;
  const int64_t end = begin + per_split < n ? begin + per_split : n;
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const T* p = x + row * n;
    T acc = is_max ? lowest<T>() : T(0);
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
      const T v = term_of<kRowTerm>(p[k]);
      acc = is_max ? max_nan(acc, v) : acc + v;
    }
    acc = is_max ? block_max(acc, shared) : block_sum(acc, shared);
    if (threadIdx.x != 0) continue;
    const T result = is_max ? acc : acc * scale;
    if (accumulate != nullptr) {
      *accumulate = *accumulate + static_cast<double>(result);
    } else {
      out[row * gridDim.y + blockIdx.y] = result;
    }
  }
}

/// One thread per output (o, i) (inner > 1), blockIdx.y taking k in [y · per_split,
/// + per_split) (Note [Split reductions]): out [gridDim.y, outer · inner].
template <class T>
__global__ void reduce_columns_kernel(const T* x, T* out, int64_t outer, int64_t n,
                                      int64_t inner, int64_t per_split, bool is_max, T scale) {
  const int64_t begin = blockIdx.y * per_split;
  const int64_t end = begin + per_split < n ? begin + per_split : n;
  PW_GRID_STRIDE_LOOP(j, outer * inner) {
    const T* p = x + (j / inner) * n * inner + j % inner;  // element k at p[k * inner]
    T acc = is_max ? lowest<T>() : T(0);
    for (int64_t k = begin; k < end; ++k) {
      acc = is_max ? max_nan(acc, p[k * inner]) : acc + p[k * inner];
    }
    out[blockIdx.y * outer * inner + j] = is_max ? acc : acc * scale;
  }
}

// Note [Split reductions]: blocks per SM the first pass aims at, and the fewest values a
// thread adds in one range (fewer, and the second pass and the partials cost more than the
// parallelism gains).
constexpr int64_t kBlocksPerSm = 4;
constexpr int64_t kMinValuesPerThread = 16;

/// How many ranges the reduced dim of n is cut into, `blocks` being the first pass's blocks
/// along x and `threads_per_output` the threads that share one output's range.
struct Split {
  int64_t splits = 1, per_split = 0;
};
Split plan_split(int64_t blocks, int64_t n, int64_t threads_per_output, int device) {
  const int64_t splits = ranges_to_fill(
      blocks, n / (threads_per_output * kMinValuesPerThread), kBlocksPerSm, device);
  Split s;
  s.per_split = (n + splits - 1) / splits;
  s.splits = s.per_split == 0 ? 1 : (n + s.per_split - 1) / s.per_split;  // none empty
  return s;
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

/// A reduction of x's rows [outer, n] (Note [Split reductions]): one pass, or two when the plan
/// splits the rows, the first taking kRowTerm of x's elements; into out [outer], or, with
/// `accumulate` (one row), added into *accumulate in float64. Where reduce's rows and a norm
/// share (Note [Norm shares]) both go, so the share sums in exactly the order of a sum.
template <class T, RowTerm kRowTerm>
void reduce_rows(const T* x, T* out, double* accumulate, int64_t outer, int64_t n, bool is_max,
                 T scale, const Device& device, cudaStream_t stream) {
  const unsigned blocks = row_grid(outer);
  const int threads = row_block(n);
  const Split split = plan_split(blocks, n, threads, device.index);
  if (split.splits == 1) {
    PW_LAUNCH((reduce_rows_kernel<T, kRowTerm>), blocks, threads, 0, stream)(
        x, out, outer, n, n, is_max, scale, accumulate);
    return;
  }
  Scratch<T> partial(device, outer * split.splits, stream);
  const dim3 grid(blocks, static_cast<unsigned>(split.splits));
  PW_LAUNCH((reduce_rows_kernel<T, kRowTerm>), grid, threads, 0, stream)(
      x, partial.get(), outer, n, split.per_split, is_max, T(1), nullptr);
  PW_CUDA_CHECK_LAUNCH("reduce_rows_kernel");
  PW_LAUNCH((reduce_rows_kernel<T, RowTerm::kValue>), blocks, row_block(split.splits), 0,
            stream)(partial.get(), out, outer, split.splits, split.splits, is_max, scale,
                    accumulate);
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
    const int device = out.device().index;
    if (inner == 1) {
      reduce_rows<T, RowTerm::kValue>(x.data<T>(), out.data<T>(), nullptr, outer, n, is_max,
                                      scale, out.device(), ctx.stream);
    } else {
      const unsigned blocks = grid_for(outer * inner);
      const Split split = plan_split(blocks, n, 1, device);
      if (split.splits == 1) {
        PW_LAUNCH(reduce_columns_kernel<T>, blocks, kBlock, 0, ctx.stream)(
            x.data<T>(), out.data<T>(), outer, n, inner, n, is_max, scale);
      } else {
        const int64_t outputs = outer * inner;
        Scratch<T> partial(out.device(), split.splits * outputs, ctx.stream);
        PW_LAUNCH(reduce_columns_kernel<T>, dim3(blocks, static_cast<unsigned>(split.splits)),
                  kBlock, 0, ctx.stream)(x.data<T>(), partial.get(), outer, n, inner,
                                         split.per_split, is_max, T(1));
        PW_CUDA_CHECK_LAUNCH("reduce_columns_kernel");
        PW_LAUNCH(reduce_columns_kernel<T>, blocks, kBlock, 0, ctx.stream)(
            partial.get(), out.data<T>(), 1, split.splits, outputs, split.splits, is_max, scale);
      }
    }
  });
  PW_CUDA_CHECK_LAUNCH(inner == 1 ? "reduce_rows_kernel" : "reduce_columns_kernel");
}

// Note [Norm shares]: a gradient's share of a 1- or 2-norm, added into a float64 total, as
// clipping and loss scaling take one per parameter (nn::grad_norm_share_on_device). Unfused it
// was four launches or five (the square, the sum's one or two passes, the cast to float64, the
// add); here it is the sum's passes alone, the first taking the term of each element, the last
// adding its float to the total in float64. The passes, the split and the order are the sum's,
// and the square is rounded to T before it is added, so the total has the unfused ops' bits.
void norm_share_add(UnaryOp term, const Tensor& x, Tensor& total) {
  const int64_t n = x.numel();
  if (n == 0) return;
  LaunchContext ctx(total);
  double* into = total.data<double>();
  dispatch_floating(x.dtype(), "norm_share_add", [&](auto zero) {
    using T = decltype(zero);
    if (term == UnaryOp::kSquare) {
      reduce_rows<T, RowTerm::kSquare>(x.data<T>(), nullptr, into, 1, n, false, T(1),
                                       total.device(), ctx.stream);
    } else {
      reduce_rows<T, RowTerm::kAbs>(x.data<T>(), nullptr, into, 1, n, false, T(1),
                                    total.device(), ctx.stream);
    }
  });
  PW_CUDA_CHECK_LAUNCH("reduce_rows_kernel");
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
