// CachingAllocator: the Allocator (tensor/allocator.h) of one GPU, which keeps freed blocks
// for reuse instead of returning them with cudaFree.
//
// Why: cudaMalloc and cudaFree are slow (cudaFree synchronizes the whole device). A training
// step frees and re-allocates the same sizes every iteration, so after the first step nearly
// every allocate() is a lookup in the cache.
//
// Size classes (every request is rounded up; counters still record the requested size):
//   bytes <= 1 MiB   -> a multiple of 512 B   (kSmallRound)
//   bytes >  1 MiB   -> a multiple of 2 MiB   (kLargeRound)
// A cached block is reused only for a request of exactly its size class (no splitting), which
// keeps the bookkeeping one map lookup and the waste bounded by the rounding.
//
// Note [Stream-aware reuse]
// A block remembers the stream it was allocated for. When it is freed, its memory may still be
// in use by kernels queued on that stream, so deallocate() records an event on it:
//
//   stream A: ──kernel(x)──┐ free(x): record event E on A
//                          │
//   allocate on A:   reuse at once: A runs its work in order, so the new user of the block
//                    cannot start before kernel(x) finishes.
//   allocate on B:   reuse only once E has completed (cudaEventQuery == success); before
//                    that a B kernel could overwrite x while kernel(x) still reads it.
//
// A tensor used on a second stream must therefore be kept alive (or that stream synchronized)
// until the second stream's work is done; this allocator only knows the allocation stream.
//
// Out of memory: the cache is emptied and cudaMalloc tried once more; then CudaError
// (code cudaErrorMemoryAllocation) naming the device, the size and the counters.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensor/allocator.h"

namespace pipewright::cuda {

class CachingAllocator final : public Allocator {
 public:
  static constexpr size_t kSmallLimit = size_t{1} << 20;  // 1 MiB
  static constexpr size_t kSmallRound = 512;
  static constexpr size_t kLargeRound = size_t{2} << 20;  // 2 MiB

  /// `device` must be a CUDA device; nothing is allocated until the first allocate().
  explicit CachingAllocator(Device device);
  /// Never called for the registered allocators (they live as long as the process).
  ~CachingAllocator() override;

  /// Device memory for `bytes` bytes (at least 256-byte aligned; nullptr for 0 bytes), to be
  /// used on `stream` (a cudaStream_t; nullptr = the legacy default stream). Thread-safe.
  /// Throws CudaError when the device is out of memory even after emptying the cache.
  void* allocate(size_t bytes, void* stream = nullptr) override;
  /// Returns a block to the cache (never to the driver). Never throws.
  void deallocate(void* ptr, size_t bytes) override;
  /// Waits for each cached block's pending work, then cudaFree's it. Live blocks stay.
  void empty_cache() override;
  /// Bytes obtained with cudaMalloc and not yet freed: live blocks plus the cache (rounded).
  int64_t reserved() const override { return reserved_.load(std::memory_order_relaxed); }

  /// The size class of a request (see the file comment).
  static size_t round_size(size_t bytes);

  // ---- introspection for tests and benchmarks ----
  /// cudaMalloc calls made so far (a cache hit does not make one).
  int64_t device_mallocs() const { return device_mallocs_.load(std::memory_order_relaxed); }
  /// Free blocks waiting in the cache.
  int64_t cached_blocks() const;

 private:
  struct FreeBlock {
    void* ptr;
    cudaStream_t stream;  // the stream it was last allocated for
    cudaEvent_t freed;    // recorded on `stream` at deallocate(); nullptr if recording failed
  };
  struct LiveBlock {
    size_t size;  // rounded
    cudaStream_t stream;
  };

  void* take_cached(size_t size, cudaStream_t stream);  // nullptr on a miss; mutex held
  void* device_malloc(size_t size);                     // mutex held; throws on OOM
  void release_cached();                                // mutex held
  cudaEvent_t new_event();                              // from the pool; mutex held

  mutable std::mutex mutex_;
  std::unordered_map<void*, LiveBlock> live_;    // handed out
  std::multimap<size_t, FreeBlock> cache_;       // rounded size -> freed blocks
  std::vector<cudaEvent_t> event_pool_;          // completed events, for reuse
  std::atomic<int64_t> reserved_{0};
  std::atomic<int64_t> device_mallocs_{0};
};

}  // namespace pipewright::cuda
