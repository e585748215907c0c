// Helpers shared by the cudasim runtime tests.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cudasim/cudasim.h"
#include "cudasim/sim_internal.h"

#define REQUIRE_CUDA(expr) REQUIRE((expr) == cudaSuccess)

namespace cudasim::testing {

/// A host callback that sleeps `ms` milliseconds: delays everything queued after it.
inline void sleep_callback(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms)));
}
inline int kLongDelayMs = 150;

/// Enqueues a "kernel" (a plain function) with explicit accesses, like PW_LAUNCH does.
inline cudaError_t fake_kernel(cudaStream_t stream, const std::string& name,
                               std::vector<Access> accesses, std::function<void()> work = [] {}) {
  return enqueue_kernel(stream, Site{name, "fake.cu", 7}, std::move(accesses), std::move(work));
}

/// A device buffer of n floats on the current device, freed at scope exit.
struct DeviceFloats {
  explicit DeviceFloats(size_t count) : n(count) {
    if (cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)) != cudaSuccess) p = nullptr;
  }
  ~DeviceFloats() { (void)cudaFree(p); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  size_t bytes() const { return n * sizeof(float); }
  float* p = nullptr;
  size_t n;
};

/// Clears leftovers of a test that provoked errors or races.
inline void clean() {
  for (int d = 0; d < simulated_device_count(); ++d) reset_device(d);
  (void)take_race_reports();
  (void)cudaSetDevice(0);
}

}  // namespace cudasim::testing
