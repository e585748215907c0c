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
//   stream A: ──kernel(x)──┐ free(x)  ·····  (B wants the block): record event E on A
//                          │
//   allocate on A:   reuse at once: A runs its work in order, so the new user of the block
//                    cannot start before kernel(x) finishes.
//   allocate on B:   reuse only once E has completed (cudaEventQuery == success); before
//                    that a B kernel could overwrite x while kernel(x) still reads it. E is
//                    recorded the first time another stream wants the block (Note [Free
//                    events, lazily], caching_allocator.cc), not at every free.
//
// Note [Streams that use a block] (record_stream)
// A block used on a second stream (a copy stream reading an activation, the next stage's
// compute stream reading what a copy stream wrote) is announced with record_stream(ptr, s),
// PyTorch's Tensor.record_stream. deallocate() then also records an event on every such
// stream, and the block is reused by *no* stream, its own included, before all of those
// events have completed:
//
//   stream A (alloc): ──kernel(x)──────────┐ free(x): event U on B (E on A when C wants x)
//   stream B (use):   ──copy(x)───────────────────────┐
//   allocate on A:    reuse once U is done (A's order says nothing about B's work)
//   allocate on C:    reuse once E and U are done
//
// Streams may be on another GPU (a peer copy): U is then an event of that GPU.
//
// Note [Graph pools]
// A CUDA graph replays the addresses its capture saw, so the memory a captured step used must
// be its own for as long as the graph lives: no other allocation may get it between replays.
// begin_graph_pool(id) .. end_graph_pool() brackets a capture that this GPU's streams take
// part in (begun on one of them, or on another GPU's stream that they joined: Note [A graph
// over devices], tensor/graph.h):
//   - an allocation on a stream that is capturing (cudaStreamIsCapturing) comes from pool `id`:
//     a block freed earlier in this capture on the same stream with no other stream's use
//     (stream order is kept in the graph), a block the pool held free before the capture began
//     (any stream), or else a new cudaMalloc, made with the thread's capture mode exchanged for
//     relaxed (cudaThreadExchangeStreamCaptureMode, as PyTorch's allocator does): the pool only
//     grows during a capture; nothing is queried, no event recorded, nothing freed;
//   - every block freed during the capture joins the pool, whatever it was allocated from (a
//     captured kernel may have read it: a tensor made before the capture and dropped during it
//     must not go to another user while the graph can still read it). Blocks of this capture
//     freed on their own stream with no other user are reusable at once (above); the others
//     wait for the capture's end, then serve later captures of the pool.
// Between captures a pool block freed by its tensor goes back to its pool, never to the cache.
// release_graph_pool(id) (the graph is gone) hands the pool's free blocks to the cache, and
// its live blocks become ordinary ones. One capture at a time per GPU, with no other work
// allocating on it meanwhile.
//
// Out of memory: the cache is emptied and cudaMalloc tried once more; then CudaError
// (code cudaErrorMemoryAllocation) naming the device, the size and the counters.
//
// Note [Direct mode]: with PIPEWRIGHT_CUDA_ALLOCATOR=direct in the environment (read when the
// allocator is made), every allocate() is a cudaMalloc of exactly the requested bytes and every
// deallocate() a cudaFree (after the streams that used the block): slow, but each tensor is
// its own allocation, so compute-sanitizer's memcheck sees a write one element past a
// tensor's end, which the cache's rounding would hide (tools/gpu/check.sh runs the sanitizer
// so). Any other value than "direct" or "caching" is reported on stderr and ignored.
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
  /// The live block starting at `ptr` is also used by work on `stream` of GPU `stream_device`
  /// (Note [Streams that use a block]). Ignored for the block's own allocation stream, a
  /// repeated stream, or a pointer this allocator did not hand out. Thread-safe; never throws.
  void record_stream(void* ptr, int stream_device, cudaStream_t stream);
  /// Waits for each cached block's pending work, then cudaFree's it. Live blocks stay.
  void empty_cache() override;
  /// Bytes obtained with cudaMalloc and not yet freed: live blocks plus the cache (rounded).
  int64_t reserved() const override { return reserved_.load(std::memory_order_relaxed); }

  /// The size class of a request (see the file comment).
  static size_t round_size(size_t bytes);
  /// True under PIPEWRIGHT_CUDA_ALLOCATOR=direct (Note [Direct mode]).
  bool direct() const { return direct_; }

  // ---- graph pools (Note [Graph pools]) ----
  /// Until end_graph_pool(), allocations on capturing streams come from pool `id` (any id;
  /// made on first use) and every freed block joins it. Throws std::logic_error when a pool
  /// is already capturing on this GPU. Thread-safe.
  void begin_graph_pool(int64_t id);
  /// Ends the capture's routing; the blocks freed during it become free in the pool. Never
  /// throws.
  void end_graph_pool();
  /// The graph that used pool `id` is gone: its free blocks go to the cache, its live ones
  /// become ordinary blocks. A no-op for an unknown id. Never throws.
  void release_graph_pool(int64_t id);
  /// Bytes pool `id` holds (live and free blocks, rounded); 0 for an unknown id.
  int64_t graph_pool_bytes(int64_t id) const;

  // ---- introspection for tests and benchmarks ----
  /// cudaMalloc calls made so far (a cache hit does not make one).
  int64_t device_mallocs() const { return device_mallocs_.load(std::memory_order_relaxed); }
  /// Free blocks waiting in the cache.
  int64_t cached_blocks() const;

  /// Test seam (fault injection): the allocate() `n` allocations from now (0: the next one) of
  /// a non-zero size fails, once, as if cudaMalloc had returned cudaErrorMemoryAllocation both
  /// times (before and after emptying the cache): the cache is released and the same CudaError
  /// is thrown. n < 0 cancels. Thread-safe.
  void fail_allocation_after(int64_t n) { fail_countdown_.store(n); }

 private:
  struct StreamUse {
    int device;  // the GPU of `stream`
    cudaStream_t stream;
  };
  struct UseEvent {
    int device;  // the GPU the event belongs to
    cudaEvent_t event;
  };
  struct FreeBlock {
    void* ptr;
    cudaStream_t stream;  // the stream it was last allocated for
    cudaEvent_t freed;    // recorded on `stream` when another stream first wants the block
                          // (Note [Free events, lazily]); nullptr until then
    std::vector<UseEvent> uses;  // recorded on each record_stream()'ed stream at deallocate()
  };
  struct LiveBlock {
    size_t size;  // rounded
    cudaStream_t stream;
    std::vector<StreamUse> uses;  // other streams, from record_stream()
    int64_t pool = -1;            // the graph pool that owns it (Note [Graph pools]); -1: none
    bool this_capture = false;    // allocated during the pool's current capture
  };
  struct PoolBlock {
    void* ptr;
    cudaStream_t stream;  // reusable during a capture by this stream only, unless
    bool any_stream;      // it was free when the capture began
  };
  struct GraphPool {
    std::multimap<size_t, PoolBlock> free;          // rounded size -> free blocks
    std::vector<std::pair<size_t, void*>> pending;  // freed during the capture, for later ones
    int64_t bytes = 0;                              // live and free blocks, rounded
  };

  void* take_cached(size_t size, cudaStream_t stream);  // nullptr on a miss; mutex held
  bool uses_done(const FreeBlock& block);               // every use event completed; mutex held
  bool record_freed(FreeBlock& block);                  // false: no event now; mutex held
  void recycle(FreeBlock& block);                       // events back to the pools; mutex held
  void* device_malloc(size_t size, bool may_release = true);  // mutex held; throws on OOM
  void* pool_allocate(GraphPool& pool, size_t size, cudaStream_t stream);  // mutex held
  bool routes_to_pool(cudaStream_t stream);             // mutex held
  void free_to_pool(void* ptr, LiveBlock block);         // mutex held
  [[noreturn]] void throw_out_of_memory(size_t size, cudaError_t status);  // mutex held
  void release_cached();                                // mutex held
  cudaEvent_t new_event(int device);                    // from the pool; mutex held

  mutable std::mutex mutex_;
  std::unordered_map<void*, LiveBlock> live_;    // handed out
  std::multimap<size_t, FreeBlock> cache_;       // rounded size -> freed blocks
  std::map<int, std::vector<cudaEvent_t>> event_pool_;  // per GPU: completed events, for reuse
  std::map<int64_t, GraphPool> graph_pools_;             // Note [Graph pools]
  int64_t capturing_pool_ = -1;                          // the pool of the capture under way
  std::atomic<int64_t> reserved_{0};
  std::atomic<int64_t> device_mallocs_{0};
  std::atomic<int64_t> fail_countdown_{-1};  // fail_allocation_after; -1: off
  const bool direct_;                         // Note [Direct mode]
};

}  // namespace pipewright::cuda
