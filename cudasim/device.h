// What nvcc gives a .cu file, for g++: included first into every cuda_kernels/*.cu file under
// --config=cudasim (the cuda_library rule passes `-include cudasim/device.h`), so the kernel
// source compiles unchanged as C++ and runs on the executor (executor.h).
//
//   __global__, __device__, __host__    nothing: kernels and device functions are C++ functions
//   __launch_bounds__(...)              nothing (launch bounds only budget registers)
//   __shared__                          `static thread_local`: one copy per OS thread, and a
//                                       block's threads are fibers of one OS thread, so one copy
//                                       per running block (not cleared between blocks: a GPU
//                                       does not clear it either)
//   threadIdx, blockIdx, blockDim,      the running CUDA thread's values (executor)
//   gridDim, warpSize
//   __syncthreads, __syncwarp,          the executor's barrier and warp collectives, with their
//   __shfl_sync / _up / _down / _xor    checks (executor.h)
//   nvcuda::wmma (<mma.h>)              cudasim/wmma.h: m16n16k16, 16-bit inputs
//   atomicAdd/Min/Max/Exch/CAS          std::atomic_ref: blocks of two streams run at once
//   __fmul_rn, __dmul_rn                a rounded product no FMA contraction merges
//   PW_LAUNCH(kernel, grid, block,      cudasim::Launch (launch.h); nvcc spells it
//             shared_bytes, stream)     kernel<<<grid, block, shared_bytes, stream>>>
//
// The static shared memory limit (48 KiB per block) is not checked here: ptxas refuses a
// kernel over it in the --config=cuda build, which CI runs on every change.
#pragma once

// Before the CUDA headers, which define these only where they are not defined
// yet.
#define __global__
#define __device__
#define __host__
#define __shared__ static thread_local
#define __launch_bounds__(...)  // a register budget for ptxas: nothing to simulate

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "cudasim/executor.h"
#include "cudasim/launch.h"
#include "cudasim/wmma.h"  // nvcuda::wmma, which nvcc's <mma.h> defines for device code only

#define threadIdx (::cudasim::thread_idx())
#define blockIdx (::cudasim::block_idx())
#define blockDim (::cudasim::block_dim())
#define gridDim (::cudasim::grid_dim())
#define warpSize 32

#define PW_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  ::cudasim::Launch(#kernel, kernel, grid, block, shared_bytes, stream, __FILE__, __LINE__)

namespace cudasim::detail {

template <class T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>,
                "a warp shuffle moves at most 8 bytes of a trivially copyable type");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}

template <class T>
T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

/// A shuffle of `var` (any trivially copyable type of at most 8 bytes) through the executor.
template <class T>
T shuffle_value(ShuffleKind kind, unsigned mask, T var, int lane_arg, int width,
                std::source_location site) {
  return from_bits<T>(shuffle(kind, mask, to_bits(var), lane_arg, width, site));
}

}  // namespace cudasim::detail

// Each builtin takes its caller's source location as a defaulted last argument:
// two threads at two different barriers (or shuffles) are told apart by it
// (executor.h).
using cudasim_site = std::source_location;

inline void __syncthreads(cudasim_site site = cudasim_site::current()) {
  ::cudasim::syncthreads(site);
}

inline void __syncwarp(unsigned mask = 0xffffffffu, cudasim_site site = cudasim_site::current()) {
  (void)::cudasim::shuffle(::cudasim::ShuffleKind::kSyncWarp, mask, 0, 0, 32, site);
}

template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32,
              cudasim_site site = cudasim_site::current()) {
  return ::cudasim::detail::shuffle_value(::cudasim::ShuffleKind::kIdx, mask, var, src_lane, width,
                                          site);
}

template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32,
                 cudasim_site site = cudasim_site::current()) {
  return ::cudasim::detail::shuffle_value(::cudasim::ShuffleKind::kUp, mask, var,
                                          static_cast<int>(delta), width, site);
}

template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                   cudasim_site site = cudasim_site::current()) {
  return ::cudasim::detail::shuffle_value(::cudasim::ShuffleKind::kDown, mask, var,
                                          static_cast<int>(delta), width, site);
}

template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32,
                  cudasim_site site = cudasim_site::current()) {
  return ::cudasim::detail::shuffle_value(::cudasim::ShuffleKind::kXor, mask, var, lane_mask, width,
                                          site);
}

// A product rounded to its type that no FMA contraction may merge with a following add, as
// nvcc's intrinsics promise: g++ at -O3 with FMA contracts a * b + c across inlining otherwise.
inline float __fmul_rn(float a, float b) {
  float r = a * b;
  asm("" : "+x"(r));
  return r;
}
inline double __dmul_rn(double a, double b) {
  double r = a * b;
  asm("" : "+x"(r));
  return r;
}

inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

template <class T>
T atomicAdd(T* address, T val) {
  return std::atomic_ref<T>(*address).fetch_add(val);
}

template <class T>
T atomicExch(T* address, T val) {
  return std::atomic_ref<T>(*address).exchange(val);
}

template <class T>
T atomicCAS(T* address, T compare, T val) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, val);
  return compare;  // the old value, whether or not it was replaced
}

template <class T>
T atomicMin(T* address, T val) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (val < old && !ref.compare_exchange_weak(old, val)) {
  }
  return old;
}

template <class T>
T atomicMax(T* address, T val) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (old < val && !ref.compare_exchange_weak(old, val)) {
  }
  return old;
}
