#include "tests/cuda/gpu_test.h"

// For Catch::TestEventListenerBase (the skip banner at the end of the run).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "tensor/stream.h"

namespace pipewright::testing {

namespace {

std::atomic<int> g_skipped{0};

/// PIPEWRIGHT_REQUIRE_GPU as a number of GPUs (0 when unset or not a positive number).
int required_gpus() {
  const char* require = std::getenv("PIPEWRIGHT_REQUIRE_GPU");
  if (require == nullptr) return 0;
  try {
    return std::max(0, std::stoi(require));
  } catch (const std::exception&) {
    return 0;
  }
}

/// At the end of the run: a banner naming how many test cases skipped. Catch2 v2 reports a
/// skipped case as passed, so this (and the WARN in each) is what tells the two apart.
struct SkipReporter : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunEnded(const Catch::TestRunStats&) override {
    const int skipped = g_skipped.load();
    if (skipped == 0) return;
    const std::string banner = "SKIPPED: " + std::to_string(skipped) +
                               " test case(s) did not run (not enough GPUs); their PASSED "
                               "means nothing. Set PIPEWRIGHT_REQUIRE_GPU=N to make this fail.";
    std::cout << "\n*** " << banner << " ***\n" << std::flush;
    std::cerr << "\n*** " << banner << " ***\n" << std::flush;
    if (const char* path = std::getenv("TEST_WARNINGS_OUTPUT_FILE")) {
      std::ofstream(path, std::ios::app) << banner << "\n";
    }
  }
};
CATCH_REGISTER_LISTENER(SkipReporter)

}  // namespace

bool gpus_available_or_skip(int needed) {
  int count = 0;
  std::string reason = "device_count(cuda) == 0";
  try {
    count = device_count(DeviceType::kCUDA);
  } catch (const std::exception& e) {
    reason = e.what();
  }
  if (count >= needed) return true;
  if (count > 0) {
    reason = "needs " + std::to_string(needed) + " GPUs, found " + std::to_string(count);
  } else {
    int raw = 0;  // ask the runtime directly, for its reason (e.g. no driver on a CI machine)
    if (const cudaError_t status = cudaGetDeviceCount(&raw); status != cudaSuccess) {
      reason = cudaGetErrorString(status);
      (void)cudaGetLastError();
    }
  }
  if (const int required = required_gpus(); required >= needed) {
    FAIL("PIPEWRIGHT_REQUIRE_GPU=" << required << " but this test could not run: " << reason);
  }
  ++g_skipped;
  WARN("SKIPPED (did not run, not a pass): " << reason);
  std::cout << "SKIPPED: " << reason << "\n";
  return false;
}

int skipped_test_cases() { return g_skipped.load(); }

Device gpu_or_shared(int i) { return Device::cuda(i % std::max(1, device_count(DeviceType::kCUDA))); }

std::vector<Device> two_stage_gpus() {
  if (!gpu_available_or_skip()) return {};
  return {gpu_or_shared(0), gpu_or_shared(1)};
}

std::string describe(const cuda::LaunchLimits& limits) {
  return "max_grid " + std::to_string(limits.max_grid) + ", max_row_block " +
         std::to_string(limits.max_row_block);
}

Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> values(static_cast<size_t>(shape.numel()));
  for (double& v : values) v = dist(rng);
  return Tensor::from_vector(values, shape).to(dtype);
}

Tensor random_indices(const Shape& shape, int64_t bound, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, bound - 1);
  std::vector<int64_t> values(static_cast<size_t>(shape.numel()));
  for (int64_t& v : values) v = dist(rng);
  return Tensor::from_vector(values, shape);
}

void check_close(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  REQUIRE(actual.shape() == expected.shape());
  const std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  double worst = 0.0;
  size_t worst_i = 0, bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(e[i])) continue;
    const double err = std::abs(a[i] - e[i]);
    const double allowed = atol + rtol * std::abs(e[i]);
    if (!(err <= allowed)) ++bad;  // NaN against a number counts as bad
    if (!(err <= worst)) {
      worst = err;
      worst_i = i;
    }
  }
  INFO("shape " << expected.shape().str() << ", rtol " << rtol << ", atol " << atol
                << ": worst |diff| " << worst << " at element " << worst_i << " (actual "
                << (a.empty() ? 0.0 : a[worst_i]) << ", expected "
                << (e.empty() ? 0.0 : e[worst_i]) << "), " << bad << " elements out of tolerance");
  CHECK(bad == 0);
}

void check_bitwise_equal(const Tensor& actual, const Tensor& expected) {
  REQUIRE(actual.shape() == expected.shape());
  REQUIRE(actual.dtype() == expected.dtype());
  const Tensor a = actual.to(Device::cpu(0)).contiguous();
  const Tensor e = expected.to(Device::cpu(0)).contiguous();
  const auto* pa = static_cast<const unsigned char*>(a.raw_data());
  const auto* pe = static_cast<const unsigned char*>(e.raw_data());
  const size_t width = element_size(a.dtype());
  int64_t first_diff = -1, diffs = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * width, pe + i * width, width) != 0) {
      if (first_diff < 0) first_diff = i;
      ++diffs;
    }
  }
  INFO(diffs << " of " << a.numel() << " elements differ bitwise; first at " << first_diff);
  CHECK(diffs == 0);
}

}  // namespace pipewright::testing
