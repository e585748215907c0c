// Helpers shared by the CUDA tests: skipping without a GPU, random inputs, CPU/GPU comparison,
// small launch caps.
//
// Every CUDA test starts with
//     if (!gpu_available_or_skip()) return;        (or gpus_available_or_skip(2) for two GPUs)
// Catch2 v2 has no SKIP(), so a skipped test case reports PASSED. To keep a skip from reading
// as a pass:
//   - PIPEWRIGHT_REQUIRE_GPU=N (N >= 1) turns every skip of a test needing at most N GPUs into
//     a FAIL. The device machine runs with N = 1; --config=cudasim sets N = 2 (cudasim
//     simulates two devices), so under cudasim no test may skip at all.
//   - every skip is a Catch2 WARN (printed even when the test passes) and is counted; at the
//     end of the run a banner "SKIPPED: k test case(s) did not run" goes to stdout and stderr
//     and, under `bazel test`, to TEST_WARNINGS_OUTPUT_FILE.
//
// Kernels are checked against the CPU reference of the same entry of struct Kernels: the
// inputs are made on the CPU, copied to cuda:0, both tables run, the results are compared.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda_kernels/launch_limits.h"
#include "tensor/kernels.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace pipewright::testing {

/// True when at least `count` CUDA devices are present. Otherwise FAILs the test when the
/// environment has PIPEWRIGHT_REQUIRE_GPU=N with N >= count, or else WARNs "SKIPPED: ...",
/// counts the skip (skipped_test_cases) and returns false.
bool gpus_available_or_skip(int count);

/// gpus_available_or_skip(1).
inline bool gpu_available_or_skip() { return gpus_available_or_skip(1); }

/// GPU `i` of a test that wants more GPUs than may be present: cuda:i where it exists, else
/// cuda:(i mod the GPUs present). A pipeline placed on gpu_or_shared(0), gpu_or_shared(1), ...
/// then runs on one GPU too, each stage still on its own worker stream. Call after
/// gpu_available_or_skip().
Device gpu_or_shared(int i);

/// The devices of a two-stage GPU pipeline: cuda:0, cuda:1 where two GPUs exist, else both
/// stages on cuda:0 (each stage still computes on its own worker stream and hands off through
/// the transport's copy stream, so the pipeline's stream ordering is exercised; peer copies
/// are not). Empty, after gpu_available_or_skip() has failed or skipped, without a GPU.
/// PIPEWRIGHT_CUDASIM_DEVICES=1 shows cudasim the one-GPU case.
std::vector<Device> two_stage_gpus();

/// How many times a test case skipped in this process (reported at the end of the run).
int skipped_test_cases();

/// Launch caps under which small inputs take the loops that only huge inputs take with the
/// default caps (cuda_kernels/launch_limits.h): grid-stride loops wrap after 256, 512 or 768
/// elements, one-block-per-row kernels loop over rows past 1, 2 or 3 blocks, and rows longer
/// than 32 or 64 elements are strided by a block. Use with cuda::ScopedLaunchLimits; tests
/// pick sizes that are multiples of none of these.
inline constexpr cuda::LaunchLimits kSmallLaunchLimits[] = {
    {.max_grid = 1, .max_row_block = 32},
    {.max_grid = 3, .max_row_block = 64},
    {.max_grid = 2, .max_row_block = 32},
};

/// "max_grid 3, max_row_block 64", for INFO.
std::string describe(const cuda::LaunchLimits& limits);

inline Device gpu() { return Device::cuda(0); }
inline const Kernels& cpu_kernels() { return kernels_for(DeviceType::kCPU); }
inline const Kernels& gpu_kernels() { return kernels_for(DeviceType::kCUDA); }

/// A CPU tensor of `shape` with elements uniform in [lo, hi) from std::mt19937(seed).
Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed, double lo = -1.0,
                     double hi = 1.0);
/// A CPU int64 tensor of `shape` with elements uniform in [0, bound).
Tensor random_indices(const Shape& shape, int64_t bound, uint32_t seed);

/// Runs `f` (GPU kernels), then waits for cuda:0's current stream, where a kernel's deferred
/// index check (Note [Deferred checks], tensor/deferred_check.h) throws: what the kernels
/// would throw if they waited for themselves.
template <class F>
void run_and_read(F&& f) {
  f();
  Stream::current(gpu()).synchronize();
}

/// CHECKs |actual - expected| <= atol + rtol * |expected| elementwise (actual on any device,
/// expected on the CPU, same shape); on failure reports the worst element. NaN equals NaN.
void check_close(const Tensor& actual, const Tensor& expected, double rtol, double atol);

/// CHECKs that both tensors (any devices) have the same shape, dtype and bytes.
void check_bitwise_equal(const Tensor& actual, const Tensor& expected);

/// Tolerances per dtype: {float32 value, float64 value}.
inline double tol(DType dtype, double f32, double f64) {
  return dtype == DType::kFloat32 ? f32 : f64;
}

}  // namespace pipewright::testing
