// The kernel executor on its own (no runtime): the CUDA thread model the kernels rely on, and
// the faults it reports for what is undefined on a GPU. Kernels here are written like
// cuda_kernels/*.cu ones and run with cudasim::run_grid directly.
#include "cudasim/device.h"  // first, as the cuda_library rule does for .cu files

#include <catch2/catch.hpp>

#include <numeric>
#include <string>
#include <vector>

#include "cudasim/executor.h"
#include "cudasim/sim_internal.h"

namespace {

using cudasim::KernelFault;
using cudasim::KernelInfo;

/// Runs `f` as every thread of grid x block (f reads threadIdx etc.).
template <class F>
void run(dim3 grid, dim3 block, F f) {
  static const KernelInfo info{"test_kernel", __FILE__, __LINE__};
  cudasim::run_grid(info, grid, block, [](const void* p) { (*static_cast<const F*>(p))(); }, &f);
}

std::string fault_of(dim3 grid, dim3 block, const std::function<void()>& f) {
  try {
    run(grid, block, f);
  } catch (const KernelFault& e) {
    return e.what();
  }
  return "";
}

template <class T>
T block_sum(T v, T* shared) {  // as cuda_kernels/launch.cuh
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < static_cast<unsigned>(warps) ? shared[threadIdx.x] : T(0);
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  return shared[0];
}

[[gnu::noinline]] float first_barrier_user(float v, float* shared) {
  shared[threadIdx.x % 32] = v;
  __syncthreads();
  return shared[0];
}

[[gnu::noinline]] float second_barrier_user(float v, float* shared) {
  __syncthreads();
  shared[threadIdx.x % 32] = v;
  return v;
}

}  // namespace

TEST_CASE("every thread of every block runs once, with its own indices") {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  std::vector<int> seen(3 * 2 * 2 * 4 * 3 * 2, 0);
  run(grid, block, [&] {
    CHECK(gridDim.x == 3);
    CHECK(blockDim.y == 3);
    const unsigned b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    const unsigned t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    ++seen[b * 24 + t];
  });
  CHECK(std::count(seen.begin(), seen.end(), 1) == static_cast<long>(seen.size()));
}

TEST_CASE("__syncthreads orders the writes before it and the reads after it") {
  // Each thread writes its slot, then reads its neighbour's: without a real barrier the
  // neighbour (a later fiber) would not have written yet.
  std::vector<int> out(256);
  run(1, 256, [&] {
    __shared__ int slot[256];
    slot[threadIdx.x] = static_cast<int>(threadIdx.x) * 10;
    __syncthreads();
    out[threadIdx.x] = slot[(threadIdx.x + 1) % 256];
  });
  for (int i = 0; i < 256; ++i) CHECK(out[i] == ((i + 1) % 256) * 10);
}

TEST_CASE("a block sum over shuffles and shared memory equals the sum") {
  for (unsigned threads : {32u, 64u, 96u, 512u, 1024u}) {
    std::vector<double> out(2);
    run(2, threads, [&] {
      __shared__ double shared[32];
      const double total = block_sum(static_cast<double>(threadIdx.x + 1000 * blockIdx.x), shared);
      if (threadIdx.x == 0) out[blockIdx.x] = total;
    });
    const double n = threads;
    CHECK(out[0] == n * (n - 1) / 2);
    CHECK(out[1] == n * (n - 1) / 2 + 1000 * n);
  }
}

TEST_CASE("shuffles: idx, up, down, xor and widths as CUDA defines them") {
  std::vector<int> idx(64), up(64), down(64), x(64), w8(64);
  run(1, 64, [&] {
    const int lane = static_cast<int>(threadIdx.x) % 32, t = static_cast<int>(threadIdx.x);
    idx[t] = __shfl_sync(0xffffffffu, t, 5);
    up[t] = __shfl_up_sync(0xffffffffu, t, 3);
    down[t] = __shfl_down_sync(0xffffffffu, t, 3);
    x[t] = __shfl_xor_sync(0xffffffffu, t, 1);
    w8[t] = __shfl_down_sync(0xffffffffu, t, 2, 8);
    (void)lane;
  });
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, base = t - lane;
    CHECK(idx[t] == base + 5);
    CHECK(up[t] == (lane >= 3 ? t - 3 : t));
    CHECK(down[t] == (lane + 3 < 32 ? t + 3 : t));
    CHECK(x[t] == (t ^ 1));
    CHECK(w8[t] == (lane % 8 + 2 < 8 ? t + 2 : t));
  }
}

TEST_CASE("atomics from every thread") {
  unsigned long long smallest = ~0ull;
  int count = 0;
  run(4, 128, [&] {
    const unsigned long long id = blockIdx.x * 128ull + threadIdx.x;
    atomicMin(&smallest, 1000 - id);
    atomicAdd(&count, 1);
  });
  CHECK(smallest == 1000 - 511);
  CHECK(count == 512);
}

TEST_CASE("a shuffle in a block that is not a multiple of 32 threads is refused") {
  const std::string msg = fault_of(1, 48, [] {
    __shfl_down_sync(0xffffffffu, 1.0f, 16);
  });
  INFO(msg);
  CHECK(msg.find("not a multiple of 32") != std::string::npos);
  CHECK(msg.find("test_kernel") != std::string::npos);
  CHECK(msg.find("block (0,0,0)") != std::string::npos);
}

TEST_CASE("a __syncthreads some threads exit without reaching is refused") {
  const std::string msg = fault_of(1, 64, [] {
    if (threadIdx.x < 32) __syncthreads();
  });
  INFO(msg);
  CHECK(msg.find("__syncthreads reached by 32 of 64 threads") != std::string::npos);
}

TEST_CASE("threads at two different __syncthreads are refused") {
  // Two block reductions in the two branches of a divergent if: each has its own barriers.
  const std::string msg = fault_of(1, 64, [] {
    __shared__ float shared[32];
    if (threadIdx.x < 32) {
      (void)first_barrier_user(1.0f, shared);
    } else {
      (void)second_barrier_user(1.0f, shared);
    }
  });
  INFO(msg);
  CHECK(msg.find("two different __syncthreads") != std::string::npos);
}

TEST_CASE("a shuffle with lanes of its mask elsewhere is refused") {
  const std::string divergent = fault_of(1, 32, [] {
    if (threadIdx.x < 16) __shfl_down_sync(0xffffffffu, 1, 1);
  });
  INFO(divergent);
  CHECK(divergent.find("has exited") != std::string::npos);
  const std::string not_self = fault_of(1, 32, [] {
    __shfl_down_sync(0x0000ffffu, 1, 1);
  });
  CHECK(not_self.find("does not name the calling lane") != std::string::npos);
  const std::string outside = fault_of(1, 32, [] {
    if (threadIdx.x < 16) __shfl_down_sync(0x0000ffffu, 1, 1);
  });
  CHECK(outside.find("not in mask") != std::string::npos);  // lane 15 reads lane 16
}

TEST_CASE("a partial-warp shuffle on exactly its mask is fine") {
  std::vector<int> out(32, -1);
  run(1, 32, [&] {
    if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, int(threadIdx.x), 1);
  });
  for (int t = 0; t < 16; ++t) CHECK(out[t] == (t ^ 1));
}

TEST_CASE("an exception in a thread names the thread; the executor stays usable") {
  const std::string msg = fault_of(dim3(2), dim3(64), [] {
    __syncthreads();
    if (blockIdx.x == 1 && threadIdx.x == 40) throw std::out_of_range("index 99 of 10");
  });
  INFO(msg);
  CHECK(msg.find("block (1,0,0), thread (40,0,0)") != std::string::npos);
  CHECK(msg.find("index 99 of 10") != std::string::npos);
  int ran = 0;
  run(1, 64, [&] {
    __syncthreads();
    atomicAdd(&ran, 1);
  });
  CHECK(ran == 64);
}

TEST_CASE("device builtins outside a kernel are refused") {
  CHECK_THROWS_AS(threadIdx, KernelFault);
  CHECK_THROWS_AS(__syncthreads(), KernelFault);
}
