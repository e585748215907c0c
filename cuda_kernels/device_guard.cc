#include "cuda_kernels/device_guard.h"

#include <array>
#include <atomic>

#include "cuda_kernels/check.h"

namespace pipewright::cuda {

DeviceGuard::DeviceGuard(int index) {
  int current = 0;
  PW_CUDA_CHECK(cudaGetDevice(&current));
  if (current != index) {
    PW_CUDA_CHECK(cudaSetDevice(index));
    previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  // A destructor must not throw; restoring a device that was valid a moment ago cannot fail
  // short of a dead context, which is then reported here and by the next checked call.
  if (previous_ >= 0) PW_CUDA_REPORT(cudaSetDevice(previous_));
}

int multiprocessor_count(int index) {
  // 0: not asked yet. Two threads asking at once both ask and store the same answer.
  static std::array<std::atomic<int>, 64> known{};
  const bool cached = index >= 0 && index < static_cast<int>(known.size());
  if (cached) {
    const int count = known[static_cast<size_t>(index)].load(std::memory_order_relaxed);
    if (count > 0) return count;
  }
  int count = 0;
  PW_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, index));
  if (cached) known[static_cast<size_t>(index)].store(count, std::memory_order_relaxed);
  return count;
}

}  // namespace pipewright::cuda
