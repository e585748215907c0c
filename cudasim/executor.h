// The kernel executor: runs a grid of CUDA threads on the calling CPU thread, one block at a
// time, each block's threads as fibers (fiber.h), with the CUDA semantics the project's
// kernels rely on and checks for what is undefined on a GPU.
//
//   run_grid(kernel, grid, block, body, arg)
//     for each block (x fastest, then y, z):
//       every thread runs body(arg) on a fiber until it finishes or waits:
//         __syncthreads()        waits for the whole block at one barrier
//         __shfl_*_sync(mask..)  waits for the lanes of `mask` in its warp at one shuffle
//       the scheduler releases a barrier when every thread of the block waits at it, and a
//       shuffle when every lane of its mask waits at it; anything else is a KernelFault:
//         - a barrier that some threads exit without reaching, or two different barriers;
//         - a shuffle mask naming a lane that does not exist (blockDim not a multiple of 32),
//           a lane that is elsewhere (divergent), or not naming the calling lane;
//         - a shuffle reading a lane outside its mask; a width not a power of two <= 32;
//         - threads waiting on one another forever.
// Fault messages name the kernel, its launch site, the block and the thread.
//
// Blocks run one after another, so a kernel that makes one block wait for another (a spin
// on a flag another block sets) hangs here as it may on a GPU; the project has none.
#pragma once

#include <vector_types.h>

#include <cstdint>
#include <source_location>
#include <string>

namespace cudasim {

/// What a launch is, for messages: the kernel's name and the launch site.
struct KernelInfo {
  std::string name;
  const char* file = nullptr;
  int line = 0;
  std::string where() const;  // "name (file:line)"
};

/// Runs `body(arg)` once per thread of `grid` × `block` on the calling thread (see the file
/// comment). Throws KernelFault (sim_internal.h) for undefined behaviour, and rethrows, wrapped
/// in a KernelFault naming the thread, any exception a thread throws.
void run_grid(const KernelInfo& kernel, dim3 grid, dim3 block, void (*body)(const void*),
              const void* arg);

// ---- the device side: what cudasim/device.h's builtins call ----

/// threadIdx, blockIdx, blockDim, gridDim of the calling CUDA thread. Throw KernelFault when
/// called outside a kernel.
const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();

/// __syncthreads(): waits until every thread of the block waits at the barrier at `site`.
/// Sites are source locations, not code addresses: g++ may duplicate one barrier call into
/// two branches (it does not know the call is convergent, as nvcc does), and that must stay
/// one barrier.
void syncthreads(std::source_location site);

enum class ShuffleKind { kIdx, kUp, kDown, kXor, kSyncWarp };

/// A warp collective: waits for the lanes of `mask`, then returns the value (8 bytes, the
/// caller's type bit-copied) of the source lane that `kind`, `lane_arg` and `width` select,
/// as __shfl_sync / _up_ / _down_ / _xor_ define it (or its own value where they say so).
uint64_t shuffle(ShuffleKind kind, unsigned mask, uint64_t value, int lane_arg, int width,
                 std::source_location site);

}  // namespace cudasim
