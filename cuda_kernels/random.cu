// Philox random fills and dropout, bit-identical to the CPU kernels.
//
// Shape legend: out / x / mask: n elements, contiguous. Element i uses the 32-bit stream value
// number offset + i (normal: elements 2j, 2j+1 use values offset+2j, offset+2j+1), see
// tensor/generator.h. The per-element math (Philox rounds, uniform, Box-Muller, dropout
// multiplier) is the inline code of tensor/philox.h, compiled here for the device: that file
// uses only correctly rounded operations and explicit fma, so the bits equal the CPU's
// (Note [Bit-identical random numbers] there).
//
// Parallel layout: one thread per 4-value Philox block c (values 4c .. 4c+3), computing the
// block once and writing the up-to-4 elements that use it. Elements of block c are
// i = 4c + lane - offset for lane 0..3, so any offset works, not only multiples of 4.
// Dtypes: float32 / float64.
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"
#include "tensor/philox.h"

namespace pipewright::cuda {
namespace {

/// The Philox blocks covering values [offset, offset + count): first block and how many.
struct BlockRange {
  uint64_t first;
  int64_t count;
};

BlockRange blocks_for(uint64_t offset, uint64_t count) {
  const uint64_t first = offset / 4, last = (offset + count + 3) / 4;  // [first, last)
  return {first, static_cast<int64_t>(last - first)};
}

template <class T>
__global__ void uniform_kernel(uint64_t seed, uint64_t offset, double lo, double hi, T* out,
                               int64_t n, BlockRange blocks) {
  PW_GRID_STRIDE_LOOP(b, blocks.count) {
    const uint64_t c = blocks.first + b;
    const philox::Block block = philox::stream_block(seed, c);
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = static_cast<int64_t>(4 * c + lane - offset);  // wraps below 0: skipped
      if (4 * c + lane >= offset && i < n) out[i] = philox::uniform<T>(block.v[lane], lo, hi);
    }
  }
}

template <class T>
__global__ void dropout_kernel(uint64_t seed, uint64_t offset, double p, const T* x, T* out,
                               T* mask, int64_t n, BlockRange blocks, const uint64_t* seed_at) {
  if (seed_at != nullptr) seed = *seed_at;  // dropout_indirect
  PW_GRID_STRIDE_LOOP(b, blocks.count) {
    const uint64_t c = blocks.first + b;
    const philox::Block block = philox::stream_block(seed, c);
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = static_cast<int64_t>(4 * c + lane - offset);
      if (4 * c + lane >= offset && i < n) {
        const T m = philox::dropout_mask<T>(block.v[lane], p);
        mask[i] = m;
        out[i] = x[i] * m;
      }
    }
  }
}

/// Pairs start at values offset + 2j. A pair starting at lane 3 (odd offsets only) takes its
/// second value from the next block, computed on demand.
template <class T>
__global__ void normal_kernel(uint64_t seed, uint64_t offset, double mean, double std, T* out,
                              int64_t n, BlockRange blocks) {
  const int64_t pairs = (n + 1) / 2;
  PW_GRID_STRIDE_LOOP(b, blocks.count) {
    const uint64_t c = blocks.first + b;
    const philox::Block block = philox::stream_block(seed, c);
    for (int lane = 0; lane < 4; ++lane) {
      const uint64_t value = 4 * c + lane;
      if (value < offset || (value - offset) % 2 != 0) continue;  // not the first of a pair
      const int64_t j = static_cast<int64_t>((value - offset) / 2);
      if (j >= pairs) continue;
      const uint32_t u0 = block.v[lane];
      const uint32_t u1 = lane < 3 ? block.v[lane + 1] : philox::stream_block(seed, c + 1).v[0];
      double z0 = 0.0, z1 = 0.0;
      philox::box_muller(u0, u1, &z0, &z1);
      out[2 * j] = philox::scale_normal<T>(z0, mean, std);
      if (2 * j + 1 < n) out[2 * j + 1] = philox::scale_normal<T>(z1, mean, std);
    }
  }
}

}  // namespace

void philox_uniform(uint64_t seed, uint64_t offset, double lo, double hi, Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  const BlockRange blocks = blocks_for(offset, static_cast<uint64_t>(n));
  dispatch_floating(out.dtype(), "philox_uniform", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(uniform_kernel<T>, grid_for(blocks.count), kBlock, 0, ctx.stream)(
        seed, offset, lo, hi, out.data<T>(), n, blocks);
  });
  PW_CUDA_CHECK_LAUNCH("uniform_kernel");
}

void philox_normal(uint64_t seed, uint64_t offset, double mean, double std, Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  // Values used: offset .. offset + 2*pairs - 1 (an odd n still consumes a whole pair).
  const BlockRange blocks = blocks_for(offset, 2 * static_cast<uint64_t>((n + 1) / 2));
  dispatch_floating(out.dtype(), "philox_normal", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(normal_kernel<T>, grid_for(blocks.count), kBlock, 0, ctx.stream)(
        seed, offset, mean, std, out.data<T>(), n, blocks);
  });
  PW_CUDA_CHECK_LAUNCH("normal_kernel");
}

namespace {
/// One dropout launch; the seed read from `seed_at` (device memory) when given.
void launch_dropout(uint64_t seed, const void* seed_at, uint64_t offset, double p,
                    const Tensor& x, Tensor& out, Tensor& mask, const char* name) {
  const int64_t n = x.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  const BlockRange blocks = blocks_for(offset, static_cast<uint64_t>(n));
  dispatch_floating(x.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(dropout_kernel<T>, grid_for(blocks.count), kBlock, 0, ctx.stream)(
        seed, offset, p, x.data<T>(), out.data<T>(), mask.data<T>(), n, blocks,
        static_cast<const uint64_t*>(seed_at));
  });
  PW_CUDA_CHECK_LAUNCH("dropout_kernel");
}
}  // namespace

void dropout(uint64_t seed, uint64_t offset, double p, const Tensor& x, Tensor& out,
             Tensor& mask) {
  launch_dropout(seed, nullptr, offset, p, x, out, mask, "dropout");
}

void dropout_indirect(const void* seed, uint64_t offset, double p, const Tensor& x, Tensor& out,
                      Tensor& mask) {
  launch_dropout(0, seed, offset, p, x, out, mask, "dropout_indirect");
}

}  // namespace pipewright::cuda
