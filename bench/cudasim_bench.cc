// How fast cudasim runs CUDA code (--config=cudasim only): what a simulated CUDA thread, a
// barrier and a launch cost, next to the same loop as a plain CPU loop. These numbers say how
// large a test can be under cudasim; they say nothing about a GPU.
//
//   tools/bazel run --config=cudasim //bench:cudasim_bench --
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include "cudasim/device.h"  // first, as the cuda_library rule does for .cu files

#include <benchmark/benchmark.h>

#include <vector>

namespace {

__global__ void axpy_kernel(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += a * x[i];
  }
}

__global__ void block_sum_kernel(const float* x, float* out, int64_t n) {
  __shared__ float partial[32];
  float v = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    v += x[i];
  }
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += partial[w];
    atomicAdd(out, total);
  }
}

struct Buffers {
  explicit Buffers(int64_t n) : n(n) {
    cudaMalloc(reinterpret_cast<void**>(&x), n * sizeof(float));
    cudaMalloc(reinterpret_cast<void**>(&y), n * sizeof(float));
    cudaMemsetAsync(x, 0, n * sizeof(float), nullptr);
    cudaMemsetAsync(y, 0, n * sizeof(float), nullptr);
    cudaDeviceSynchronize();
  }
  ~Buffers() {
    cudaFree(x);
    cudaFree(y);
  }
  int64_t n;
  float* x = nullptr;
  float* y = nullptr;
};

unsigned blocks(int64_t n) { return static_cast<unsigned>((n + 255) / 256); }

// One simulated thread per element (a grid-stride kernel with a full grid): launch + run + sync.
void BM_ElementwiseKernel(benchmark::State& state) {
  Buffers b(state.range(0));
  for (auto _ : state) {
    PW_LAUNCH(axpy_kernel, blocks(b.n), 256, 0, nullptr)(2.0f, b.x, b.y, b.n);
    cudaDeviceSynchronize();
  }
  state.counters["threads/s"] =
      benchmark::Counter(static_cast<double>(b.n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ElementwiseKernel)->Arg(1 << 10)->Arg(1 << 16)->Arg(1 << 20)->UseRealTime();

// The same work as a plain loop on the host: the floor cudasim's cost is measured against.
void BM_ElementwiseHostLoop(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(n, 0.0f), y(n, 0.0f);
  for (auto _ : state) {
    for (int64_t i = 0; i < n; ++i) y[i] += 2.0f * x[i];
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["threads/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ElementwiseHostLoop)->Arg(1 << 20);

// Threads that wait: 5 shuffles and a __syncthreads each (every thread gets its own fiber stack).
void BM_BlockReduceKernel(benchmark::State& state) {
  Buffers b(state.range(0));
  for (auto _ : state) {
    PW_LAUNCH(block_sum_kernel, blocks(b.n), 256, 0, nullptr)(b.x, b.y, b.n);
    cudaDeviceSynchronize();
  }
  state.counters["threads/s"] =
      benchmark::Counter(static_cast<double>(b.n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_BlockReduceKernel)->Arg(1 << 16)->Arg(1 << 20)->UseRealTime();

// An empty launch and its synchronisation: the fixed cost of one stream operation.
void BM_LaunchAndSync(benchmark::State& state) {
  Buffers b(1);
  for (auto _ : state) {
    PW_LAUNCH(axpy_kernel, 1, 32, 0, nullptr)(2.0f, b.x, b.y, int64_t{0});
    cudaDeviceSynchronize();
  }
}
BENCHMARK(BM_LaunchAndSync)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
