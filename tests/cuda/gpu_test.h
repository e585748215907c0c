// Helpers shared by the CUDA tests: skipping without a GPU, random inputs, CPU/GPU comparison.
//
// Every CUDA test starts with
//     if (!gpu_available_or_skip()) return;
// On a machine without a GPU (CI) that prints "SKIPPED: no GPU" and the test passes, unless
// PIPEWRIGHT_REQUIRE_GPU=1 is set (the device machine), where it FAILs: a GPU run must never
// pass by skipping. Catch2 v2 has no SKIP(), hence this function.
//
// Kernels are checked against the CPU reference of the same entry of struct Kernels: the
// inputs are made on the CPU, copied to cuda:0, both tables run, the results are compared.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/tensor.h"

namespace pipewright::testing {

/// True when a CUDA device is present; otherwise prints "SKIPPED: no GPU (<reason>)" and
/// returns false, or FAILs the test when the environment has PIPEWRIGHT_REQUIRE_GPU=1.
bool gpu_available_or_skip();

inline Device gpu() { return Device::cuda(0); }
inline const Kernels& cpu_kernels() { return kernels_for(DeviceType::kCPU); }
inline const Kernels& gpu_kernels() { return kernels_for(DeviceType::kCUDA); }

/// A CPU tensor of `shape` with elements uniform in [lo, hi) from std::mt19937(seed).
Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed, double lo = -1.0,
                     double hi = 1.0);
/// A CPU int64 tensor of `shape` with elements uniform in [0, bound).
Tensor random_indices(const Shape& shape, int64_t bound, uint32_t seed);

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
