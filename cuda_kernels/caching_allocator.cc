// CachingAllocator: see the header for size classes, Note [Stream-aware reuse] and
// Note [Streams that use a block].
#include "cuda_kernels/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "cuda_kernels/check.h"
#include "cuda_kernels/device_guard.h"

namespace pipewright::cuda {

namespace {

// Note [Direct mode]
bool direct_mode_from_environment() {
  const char* value = std::getenv("PIPEWRIGHT_CUDA_ALLOCATOR");
  if (value == nullptr || std::strcmp(value, "caching") == 0) return false;
  if (std::strcmp(value, "direct") == 0) return true;
  std::fprintf(stderr,
               "pipewright: PIPEWRIGHT_CUDA_ALLOCATOR=%s is neither 'caching' nor 'direct'; "
               "caching\n",
               value);
  return false;
}

}  // namespace

CachingAllocator::CachingAllocator(Device device)
    : Allocator(device), direct_(direct_mode_from_environment()) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    DeviceGuard guard(device());
    release_cached();
    for (auto& [gpu, events] : event_pool_) {
      for (cudaEvent_t e : events) PW_CUDA_REPORT(cudaEventDestroy(e));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipewright: ~CachingAllocator(%s): %s\n", device().str().c_str(),
                 e.what());
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
  const size_t size = direct_ ? bytes : round_size(bytes);
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceGuard guard(device());
  for (int64_t c = fail_countdown_.load(); c >= 0;) {  // fail_allocation_after (a test seam)
    if (fail_countdown_.compare_exchange_weak(c, c - 1)) {
      if (c == 0) {
        release_cached();
        throw_out_of_memory(size, cudaErrorMemoryAllocation);
      }
      break;
    }
  }
  if (capturing_pool_ >= 0 && routes_to_pool(stream)) {  // Note [Graph pools]
    void* ptr = pool_allocate(graph_pools_[capturing_pool_], size, stream);
    live_.emplace(ptr, LiveBlock{size, stream, {}, capturing_pool_, true});
    count_alloc(bytes);
    return ptr;
  }
  void* ptr = direct_ ? nullptr : take_cached(size, stream);
  if (ptr == nullptr) ptr = device_malloc(size);
  live_.emplace(ptr, LiveBlock{size, stream, {}});
  count_alloc(bytes);
  return ptr;
}

// ---- Note [Graph pools] ----

bool CachingAllocator::routes_to_pool(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();  // the legacy stream beside a capturing blocking one: no pool
    return false;
  }
  return status != cudaStreamCaptureStatusNone;  // an invalidated capture too: no queries
}

void* CachingAllocator::pool_allocate(GraphPool& pool, size_t size, cudaStream_t stream) {
  auto [first, last] = pool.free.equal_range(size);
  for (auto it = first; it != last; ++it) {
    if (it->second.any_stream || it->second.stream == stream) {
      void* ptr = it->second.ptr;
      pool.free.erase(it);
      return ptr;
    }
  }
  // A new block. cudaMalloc is a "potentially unsafe" call during a capture: it is not
  // captured, which is what a pool wants (the block outlives the capture, the graph reuses
  // it), so this thread's mode is relaxed for that one call.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  PW_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  void* ptr = nullptr;
  try {
    ptr = device_malloc(size, /*may_release=*/false);  // cudaFree is refused in a capture
  } catch (...) {
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    throw;
  }
  PW_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  pool.bytes += static_cast<int64_t>(size);
  return ptr;
}

void CachingAllocator::begin_graph_pool(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (capturing_pool_ >= 0) {
    throw std::logic_error("CachingAllocator(" + device().str() + "): graph pool " +
                           std::to_string(capturing_pool_) +
                           " is still capturing; one capture at a time per GPU");
  }
  GraphPool& pool = graph_pools_[id];
  for (auto& [size, block] : pool.free) block.any_stream = true;
  capturing_pool_ = id;
}

void CachingAllocator::end_graph_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (capturing_pool_ < 0) return;
  GraphPool& pool = graph_pools_[capturing_pool_];
  try {
    for (const auto& [size, ptr] : pool.pending) {
      pool.free.emplace(size, PoolBlock{ptr, nullptr, true});
    }
  } catch (...) {
    // Out of host memory for an entry: that block stays the pool's, unused (counted).
  }
  pool.pending.clear();
  for (auto& [ptr, block] : live_) {
    if (block.pool == capturing_pool_) block.this_capture = false;
  }
  capturing_pool_ = -1;
}

void CachingAllocator::release_graph_pool(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = graph_pools_.find(id);
  if (it == graph_pools_.end()) return;
  if (capturing_pool_ == id) capturing_pool_ = -1;
  GraphPool& pool = it->second;
  pool.pending.clear();  // (only a capture that never ended leaves some; they are lost)
  // The graph's last replay may still run, on whatever stream launched it (not the streams
  // its blocks record): wait for the GPU before its live blocks become ordinary ones, reused
  // by their recorded stream's order alone, and before the free ones go back to the driver.
  DeviceGuard guard(device());
  PW_CUDA_REPORT(cudaDeviceSynchronize());
  for (const auto& [size, block] : pool.free) {
    PW_CUDA_REPORT(cudaFree(block.ptr));
    reserved_.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
  }
  for (auto& [ptr, block] : live_) {
    if (block.pool == id) block.pool = -1;  // an ordinary block from now on
  }
  graph_pools_.erase(it);
}

int64_t CachingAllocator::graph_pool_bytes(int64_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = graph_pools_.find(id);
  return it == graph_pools_.end() ? 0 : it->second.bytes;
}

namespace {
/// True when `event` has completed; throws CudaError for a real failure.
bool completed(cudaEvent_t event) {
  // cudaEventQuery: cudaSuccess = done, cudaErrorNotReady = still pending.
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaSuccess) return true;
  if (status != cudaErrorNotReady) check(status, "cudaEventQuery(event)", __FILE__, __LINE__);
  (void)cudaGetLastError();  // cudaErrorNotReady is not an error; clear it
  return false;
}

/// True when `stream` has no queued work left; throws CudaError for a real failure.
bool idle(cudaStream_t stream) {
  const cudaError_t status = cudaStreamQuery(stream);
  if (status == cudaSuccess) return true;
  if (status != cudaErrorNotReady) check(status, "cudaStreamQuery(stream)", __FILE__, __LINE__);
  (void)cudaGetLastError();
  return false;
}
}  // namespace

bool CachingAllocator::uses_done(const FreeBlock& block) {
  return std::all_of(block.uses.begin(), block.uses.end(),
                     [](const UseEvent& use) { return completed(use.event); });
}

// Only blocks whose other-stream uses are done; among them the same stream first (no wait
// needed), else any block whose own stream is idle or whose free event has completed.
void* CachingAllocator::take_cached(size_t size, cudaStream_t stream) {
  auto [first, last] = cache_.equal_range(size);
  auto chosen = last;
  for (auto it = first; it != last; ++it) {
    if (it->second.stream == stream && uses_done(it->second)) {
      chosen = it;
      break;
    }
  }
  if (chosen == last) {
    for (auto it = first; it != last; ++it) {
      FreeBlock& block = it->second;
      if (block.stream == stream) continue;  // its other-stream uses are not done
      if (block.freed == nullptr) {  // Note [Free events, lazily]
        if (idle(block.stream)) {    // all of its stream's work is done, the block's too
          if (!uses_done(block)) continue;
          chosen = it;
          break;
        }
        if (!record_freed(block)) continue;
      }
      if (completed(block.freed) && uses_done(block)) {
        chosen = it;
        break;
      }
    }
  }
  if (chosen == last) return nullptr;
  void* ptr = chosen->second.ptr;
  recycle(chosen->second);
  cache_.erase(chosen);
  return ptr;
}

// Note [Free events, lazily]: the event that marks a block's last use on its own stream is
// recorded the first time another stream wants the block, not at every free: a block freed
// and taken again on one stream (nearly every block of a training step) never needs one. An
// event recorded now, later on that stream than the free, still comes after the block's last
// use there; it only completes a little later.
bool CachingAllocator::record_freed(FreeBlock& block) {
  cudaEvent_t freed = nullptr;
  try {
    freed = new_event(device().index);
  } catch (const std::exception&) {
    return false;  // no event: not reusable across streams for now
  }
  if (!PW_CUDA_REPORT(cudaEventRecord(freed, block.stream))) {
    event_pool_[device().index].push_back(freed);
    return false;
  }
  block.freed = freed;
  return true;
}

void CachingAllocator::recycle(FreeBlock& block) {
  if (block.freed != nullptr) event_pool_[device().index].push_back(block.freed);
  for (const UseEvent& use : block.uses) event_pool_[use.device].push_back(use.event);
  block.freed = nullptr;
  block.uses.clear();
}

void* CachingAllocator::device_malloc(size_t size, bool may_release) {
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, size);
  if (status == cudaErrorMemoryAllocation && may_release) {
    (void)cudaGetLastError();
    release_cached();  // give the cache back to the driver and try once more
    status = cudaMalloc(&ptr, size);
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw_out_of_memory(size, status);
  }
  reserved_.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  device_mallocs_.fetch_add(1, std::memory_order_relaxed);
  return ptr;
}

void CachingAllocator::throw_out_of_memory(size_t size, cudaError_t status) {
  throw CudaError("CachingAllocator: cudaMalloc of " + std::to_string(size) + " bytes on " +
                      device().str() + " failed: " + error_text(status) + " (allocated " +
                      std::to_string(allocated()) + " bytes, reserved " +
                      std::to_string(reserved()) + " bytes)",
                  static_cast<int>(status));
}

void CachingAllocator::record_stream(void* ptr, int stream_device, cudaStream_t stream) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;  // not a block start of ours: nothing we could protect
  LiveBlock& block = it->second;
  if (stream_device == device().index && stream == block.stream) return;
  for (const StreamUse& use : block.uses) {
    if (use.device == stream_device && use.stream == stream) return;
  }
  try {
    block.uses.push_back({stream_device, stream});
  } catch (...) {
    // Out of host memory for one entry: wait for the stream instead (correct, only slower).
    DeviceGuard guard(stream_device);
    PW_CUDA_REPORT(cudaStreamSynchronize(stream));
  }
}

void CachingAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;  // not ours: an internal bug; ignore rather than crash
  LiveBlock block = std::move(it->second);
  live_.erase(it);
  count_free(bytes);
  if (capturing_pool_ >= 0 || block.pool >= 0) {  // Note [Graph pools]
    try {
      free_to_pool(ptr, std::move(block));
    } catch (...) {
      // Out of host memory for an entry: the block stays the pool's, unused (counted).
    }
    return;
  }
  if (direct_) {  // Note [Direct mode]: cudaFree waits for this GPU; the other users first
    for (const StreamUse& use : block.uses) {
      if (use.device == device().index) continue;
      try {
        DeviceGuard guard(use.device);
        PW_CUDA_REPORT(cudaStreamSynchronize(use.stream));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "pipewright: freeing a block of %s: %s\n", device().str().c_str(),
                     e.what());
      }
    }
    try {
      DeviceGuard guard(device());
      PW_CUDA_REPORT(cudaFree(ptr));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pipewright: freeing a block of %s: %s\n", device().str().c_str(),
                   e.what());
    }
    reserved_.fetch_sub(static_cast<int64_t>(block.size), std::memory_order_relaxed);
    return;
  }
  // Record "the block's last use on each stream" (Note [Stream-aware reuse], Note [Streams
  // that use a block]). Runs from Storage's destructor, so nothing here may throw. When the
  // free-time event cannot be recorded (the runtime is shutting down) the block can still be
  // reused on its own stream; when a use event cannot be recorded, that stream is waited for
  // here instead.
  FreeBlock free_block{ptr, block.stream, nullptr, {}};  // Note [Free events, lazily]
  for (const StreamUse& use : block.uses) {
    try {
      DeviceGuard guard(use.device);  // an event must belong to its stream's GPU
      cudaEvent_t e = new_event(use.device);
      if (PW_CUDA_REPORT(cudaEventRecord(e, use.stream))) {
        free_block.uses.push_back({use.device, e});
        continue;
      }
      PW_CUDA_REPORT(cudaEventDestroy(e));
      PW_CUDA_REPORT(cudaStreamSynchronize(use.stream));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pipewright: freeing a block of %s: %s\n", device().str().c_str(),
                   e.what());
      PW_CUDA_REPORT(cudaStreamSynchronize(use.stream));
    }
  }
  try {
    cache_.emplace(block.size, std::move(free_block));
  } catch (...) {
    // Out of host memory for the cache entry: the block is lost to this process (still
    // counted in reserved()); better than crashing in a destructor.
  }
}

void CachingAllocator::free_to_pool(void* ptr, LiveBlock block) {
  if (capturing_pool_ < 0) {  // a pool's block, between captures
    graph_pools_[block.pool].free.emplace(block.size, PoolBlock{ptr, block.stream, true});
    return;
  }
  GraphPool& pool = graph_pools_[capturing_pool_];
  if (block.pool != capturing_pool_) {  // it joins the capturing pool
    pool.bytes += static_cast<int64_t>(block.size);
    if (block.pool >= 0) graph_pools_[block.pool].bytes -= static_cast<int64_t>(block.size);
  }
  if (block.pool == capturing_pool_ && block.this_capture && block.uses.empty()) {
    pool.free.emplace(block.size, PoolBlock{ptr, block.stream, false});  // its stream's, now
  } else {
    pool.pending.emplace_back(block.size, ptr);  // later captures'
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceGuard guard(device());
  release_cached();
}

void CachingAllocator::release_cached() {
  for (auto& [size, block] : cache_) {
    // Its last kernels, on every stream that used it, must finish first.
    if (block.freed != nullptr) {
      PW_CUDA_REPORT(cudaEventSynchronize(block.freed));
    } else {
      PW_CUDA_REPORT(cudaStreamSynchronize(block.stream));  // Note [Free events, lazily]
    }
    for (const UseEvent& use : block.uses) PW_CUDA_REPORT(cudaEventSynchronize(use.event));
    recycle(block);
    PW_CUDA_REPORT(cudaFree(block.ptr));
    reserved_.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
  }
  cache_.clear();
}

cudaEvent_t CachingAllocator::new_event(int device) {
  auto& pool = event_pool_[device];
  if (!pool.empty()) {
    cudaEvent_t e = pool.back();
    pool.pop_back();
    return e;
  }
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  PW_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

}  // namespace pipewright::cuda
