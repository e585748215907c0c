// Device-side helpers shared by the kernel files: launch sizes, grid-stride loops, block-wide
// reductions and dtype dispatch. Included by .cu files only (nvcc).
//
// Conventions of every kernel in cuda_kernels/:
//  - one thread per element in a grid-stride loop (for i = global id; i < n; i += grid size),
//    indices in int64 so tensors over 2^31 elements work;
//  - launched on the calling thread's current stream of the output's device (LaunchContext),
//    with the launch checked at once (PW_CUDA_CHECK_LAUNCH);
//  - arithmetic in the tensor's own dtype unless a comment says otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda_kernels/check.h"
#include "cuda_kernels/device_guard.h"
#include "cuda_kernels/launch_limits.h"
#include "tensor/tensor.h"

// PW_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...) launches a kernel: under nvcc
// it is kernel<<<grid, block, shared_bytes, stream>>>(args...); under --config=cudasim,
// cudasim/device.h (included before this file) defines it to run on simulated GPUs. A kernel
// name with a comma in it is parenthesised: PW_LAUNCH((cast_kernel<S, D>), ...).
#ifndef PW_LAUNCH
#define PW_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  kernel<<<grid, block, shared_bytes, stream>>>
#endif

namespace pipewright::cuda {

constexpr int kBlock = 256;  // threads per block of elementwise kernels

/// Blocks for n elements at kBlock threads each (at least 1, at most launch_limits().max_grid;
/// the grid-stride loop covers the rest).
inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock, cap = launch_limits().max_grid;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

/// Blocks for one-block-per-row kernels (at least 1, at most launch_limits().max_grid; they
/// loop over the rest).
inline unsigned row_grid(int64_t rows) {
  const int64_t cap = launch_limits().max_grid;
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > cap ? cap : rows));
}

/// How many ranges (gridDim.y) to cut a long loop into so that `blocks` blocks along x, times
/// the ranges, make `blocks_per_sm` blocks per SM of `device`, one wave: at least 1, at most
/// `most` (the ranges the work has of a useful size), launch_limits().max_grid and gridDim.y's
/// 65535. The split reductions, LayerNorm's and BatchNorm's channel sums and index_add's
/// ranges of rows use it, so a short grid still fills the GPU.
inline int64_t ranges_to_fill(int64_t blocks, int64_t most, int64_t blocks_per_sm, int device) {
  int64_t ranges = blocks_per_sm * multiprocessor_count(device) / (blocks < 1 ? 1 : blocks);
  for (const int64_t cap : {most, launch_limits().max_grid, int64_t{65535}}) {
    ranges = ranges < cap ? ranges : cap;
  }
  return ranges < 1 ? 1 : ranges;
}

/// The device and stream a kernel runs on: the output tensor's device, made current for the
/// scope, and that device's current stream.
struct LaunchContext {
  explicit LaunchContext(const Tensor& out)
      : guard(out.device()), stream(current_stream(out.device())) {}
  DeviceGuard guard;
  cudaStream_t stream;
};

/// Grid-stride loop over [0, n): `for (int64_t i : GridStride(n))`-style, as a macro so the
/// loop body stays ordinary code.
#define PW_GRID_STRIDE_LOOP(i, n)                                                  \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;     \
       i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// ---- dtype dispatch (host side) ----

/// Calls f(T{}) with T = float or double for a floating dtype; throws std::invalid_argument
/// naming `op` and the dtype otherwise.
template <class F>
void dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(float{}); return;
    case DType::kFloat64: f(double{}); return;
    default:
      throw std::invalid_argument(std::string("cuda ") + op + ": unsupported dtype " +
                                  dtype_name(dtype) + " (float32 or float64 expected)");
  }
}

/// Like dispatch_floating, and T = int64_t for int64.
template <class F>
void dispatch_all(DType dtype, const char* op, F&& f) {
  if (dtype == DType::kInt64) {
    f(int64_t{});
    return;
  }
  dispatch_floating(dtype, op, static_cast<F&&>(f));
}

/// For kernels that only move or convert values (fill, cast): every dtype, the 16-bit ones as
/// BFloat16 / Half (tensor/half.h: the same rounding as the CPU's, bit for bit).
template <class F>
void dispatch_any(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kBFloat16: f(BFloat16{}); return;
    case DType::kFloat16: f(Half{}); return;
    default: dispatch_all(dtype, op, static_cast<F&&>(f));
  }
}

/// For kernels that move elements as raw words: f(W{}) with W the unsigned integer of the
/// dtype's size (2, 4 or 8 bytes), so one kernel serves every dtype of that size.
template <class F>
void dispatch_word(DType dtype, F&& f) {
  switch (element_size(dtype)) {
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    default: f(uint64_t{}); return;
  }
}

/// The smallest value of T: -inf for floating types, the minimum for integers.
template <class T>
__host__ __device__ constexpr T lowest() {
  if constexpr (std::is_floating_point_v<T>) {
    return -std::numeric_limits<T>::infinity();
  } else {
    return std::numeric_limits<T>::lowest();
  }
}

// ---- block-wide reductions (device side) ----
// Each thread brings one value; every thread gets the block's result. `shared` must hold
// blockDim.x / 32 values. blockDim.x must be a multiple of 32 (warp size).

template <class T>
__device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

template <class T>
__device__ inline T warp_max(T v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const T other = __shfl_down_sync(0xffffffffu, v, offset);
    v = other > v || other != other ? other : v;  // NaN wins, like torch.max
  }
  return v;
}

/// Sum over the block (tree order: not the same rounding as a sequential CPU loop).
template <class T>
__device__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = static_cast<int>(threadIdx.x) < warps ? shared[threadIdx.x] : T(0);
  if (warp == 0) v = warp_sum(v);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  return shared[0];
}

/// Max over the block (NaN propagates). Threads without data bring -infinity (or the lowest
/// value for integers).
template <class T>
__device__ T block_max(T v, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = static_cast<int>(threadIdx.x) < warps ? shared[threadIdx.x] : lowest<T>();
  if (warp == 0) v = warp_max(v);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  return shared[0];
}

/// Threads per block for a row of `cols` elements: a power of two from 32 to
/// launch_limits().max_row_block (512).
inline int row_block(int64_t cols) {
  const int cap = launch_limits().max_row_block;
  int threads = 32;
  while (threads < cols && threads < cap) threads *= 2;
  return threads;
}

}  // namespace pipewright::cuda
