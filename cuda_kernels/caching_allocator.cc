// CachingAllocator: see the header for size classes and Note [Stream-aware reuse].
#include "cuda_kernels/caching_allocator.h"

#include <string>

#include "cuda_kernels/check.h"
#include "cuda_kernels/device_guard.h"

namespace pipewright::cuda {

CachingAllocator::CachingAllocator(Device device) : Allocator(device) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    DeviceGuard guard(device());
    release_cached();
    for (cudaEvent_t e : event_pool_) (void)cudaEventDestroy(e);
  } catch (...) {
    // The runtime may be gone already at process exit; the driver reclaims everything.
  }
}

size_t CachingAllocator::round_size(size_t bytes) {
  const size_t unit = bytes <= kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + unit - 1) / unit * unit;
}

int64_t CachingAllocator::cached_blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(cache_.size());
}

void* CachingAllocator::allocate(size_t bytes, void* stream_handle) {
  if (bytes == 0) return nullptr;
  const size_t size = round_size(bytes);
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceGuard guard(device());
  void* ptr = take_cached(size, stream);
  if (ptr == nullptr) ptr = device_malloc(size);
  live_.emplace(ptr, LiveBlock{size, stream});
  count_alloc(bytes);
  return ptr;
}

// Same stream first (no wait needed), else any block whose free-time event has completed.
void* CachingAllocator::take_cached(size_t size, cudaStream_t stream) {
  auto [first, last] = cache_.equal_range(size);
  auto chosen = last;
  for (auto it = first; it != last; ++it) {
    if (it->second.stream == stream) {
      chosen = it;
      break;
    }
  }
  if (chosen == last) {
    for (auto it = first; it != last; ++it) {
      // cudaEventQuery: cudaSuccess = done, cudaErrorNotReady = still pending.
      const cudaEvent_t e = it->second.freed;
      if (e == nullptr) continue;  // recording failed at free time: never safe across streams
      const cudaError_t status = cudaEventQuery(e);
      if (status == cudaSuccess) {
        chosen = it;
        break;
      }
      if (status != cudaErrorNotReady) check(status, "cudaEventQuery(freed)", __FILE__, __LINE__);
      (void)cudaGetLastError();  // cudaErrorNotReady is not an error; clear it
    }
  }
  if (chosen == last) return nullptr;
  void* ptr = chosen->second.ptr;
  if (chosen->second.freed != nullptr) event_pool_.push_back(chosen->second.freed);
  cache_.erase(chosen);
  return ptr;
}

void* CachingAllocator::device_malloc(size_t size) {
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, size);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    release_cached();  // give the cache back to the driver and try once more
    status = cudaMalloc(&ptr, size);
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw CudaError("CachingAllocator: cudaMalloc of " + std::to_string(size) + " bytes on " +
                        device().str() + " failed: " + error_text(status) + " (allocated " +
                        std::to_string(allocated()) + " bytes, reserved " +
                        std::to_string(reserved()) + " bytes)",
                    static_cast<int>(status));
  }
  reserved_.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  device_mallocs_.fetch_add(1, std::memory_order_relaxed);
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;  // not ours: an internal bug; ignore rather than crash
  const LiveBlock block = it->second;
  live_.erase(it);
  count_free(bytes);
  // Record "the block's last use on its stream" (Note [Stream-aware reuse]). Runs from
  // Storage's destructor, so nothing here may throw; when recording fails (the runtime is
  // shutting down) the block can still be reused on its own stream.
  cudaEvent_t freed = nullptr;
  try {
    DeviceGuard guard(device());
    freed = new_event();
    if (cudaEventRecord(freed, block.stream) != cudaSuccess) {
      (void)cudaGetLastError();
      (void)cudaEventDestroy(freed);
      freed = nullptr;
    }
  } catch (...) {
    freed = nullptr;
  }
  cache_.emplace(block.size, FreeBlock{ptr, block.stream, freed});
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceGuard guard(device());
  release_cached();
}

void CachingAllocator::release_cached() {
  for (auto& [size, block] : cache_) {
    if (block.freed != nullptr) {
      (void)cudaEventSynchronize(block.freed);  // its last kernels must finish first
      event_pool_.push_back(block.freed);
    }
    (void)cudaFree(block.ptr);
    reserved_.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
  }
  cache_.clear();
  (void)cudaGetLastError();
}

cudaEvent_t CachingAllocator::new_event() {
  if (!event_pool_.empty()) {
    cudaEvent_t e = event_pool_.back();
    event_pool_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  PW_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

}  // namespace pipewright::cuda
