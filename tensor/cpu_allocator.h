// CpuAllocator: the allocator of every virtual CPU device, caching freed blocks for reuse.
//
// Note [CPU caching allocator]
// A pipelined step allocates a tensor on one worker's thread and frees it on another's (the
// messages between stages, gradients). glibc keeps a free list per thread arena, so such a
// block goes back to the wrong arena, large blocks are unmapped, and the next step touches
// fresh pages again: ~2.4 k minor page faults per step in bench/pipe_bench before this
// allocator. Since the shapes of a training step repeat exactly from step to step, keeping
// freed blocks and handing them out again removes that cost entirely.
//
//   allocate(bytes)  ──► size class c = size_class(bytes) ──► free_[c] not empty? pop : malloc(c)
//   deallocate(p)    ──► cached_ + c <= max_cached_bytes ?  free_[c].push(p) : free(p)
//   empty_cache()    ──► free every cached block
//
// Size classes: multiples of 64 bytes up to 1 KiB, then four classes per power of two
// (2^k·{1.25, 1.5, 1.75, 2}), so a block wastes less than a quarter of its size and shapes
// that differ a little still share a class. A block is reused only for its own class (no
// splitting, no coalescing): simple, and exact for the repeating shapes of training.
// Policy: a freed block is cached while the cache holds at most `max_cached_bytes` (default
// 1 GiB per device, PIPEWRIGHT_CPU_CACHE_MAX_MB), beyond that it goes back to the system; when
// the system refuses memory the cache is emptied and the allocation tried once more. The cap
// bounds what a program whose shapes keep changing can strand in the cache; a training loop
// never reaches it (its cache holds one step's working set).
// One mutex per allocator guards the free lists: a step makes a few hundred allocations, far
// from where a lock would matter, and any thread may free what another allocated.
//
// Counters: allocated() and peak() count the bytes REQUESTED by tensors in use, exactly as
// without caching (tests assert them); reserved() counts the bytes held from the system: the
// size classes of the blocks in use plus the cached ones, so reserved() >= allocated().
//
// Sanitizers: a cache hides a use-after-free from AddressSanitizer (the block is still valid
// memory). So caching is off by default in an ASan build (__SANITIZE_ADDRESS__), and
// PIPEWRIGHT_CPU_CACHING=0 turns it off in any build (=1 forces it on). When a cached block
// exists in an ASan build, it is poisoned while cached, so a stale access is still reported.
// With caching off, reserved() == allocated().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "tensor/allocator.h"

namespace pipewright {

struct CpuAllocatorOptions {
  bool caching = true;
  /// The most bytes (size classes) kept in the cache; a freed block beyond it is released.
  size_t max_cached_bytes = size_t{1} << 30;

  /// The defaults, then PIPEWRIGHT_CPU_CACHING (0 or 1) and PIPEWRIGHT_CPU_CACHE_MAX_MB (a
  /// count of MiB) when set; caching defaults to off in an AddressSanitizer build. Throws
  /// std::invalid_argument naming the variable and its value when either is malformed.
  static CpuAllocatorOptions from_environment();
};

class CpuAllocator final : public Allocator {
 public:
  CpuAllocator(Device device, CpuAllocatorOptions options);
  ~CpuAllocator() override;

  /// 64-byte aligned memory for `bytes` bytes (nullptr for 0). Throws std::bad_alloc when
  /// the system has no memory left even after emptying the cache.
  void* allocate(size_t bytes, void* stream = nullptr) override;
  void deallocate(void* ptr, size_t bytes) override;
  /// Returns every cached block to the system.
  void empty_cache() override;
  int64_t reserved() const override;

  /// Bytes (size classes) of the cached, unused blocks.
  int64_t cached() const;
  const CpuAllocatorOptions& options() const { return options_; }

  /// The bytes a block for `bytes` occupies: a multiple of 64 up to 1 KiB, above that the
  /// next of 2^k·{1.25, 1.5, 1.75, 2}.
  static size_t size_class(size_t bytes);

  /// Test seam (fault injection): the allocation `n` allocations from now (0: the
  /// next one) of a non-zero size throws std::bad_alloc, once, as if the system refused it;
  /// n < 0 cancels. Thread-safe.
  void fail_allocation_after(int64_t n) { fail_countdown_.store(n); }

 private:
  void* system_allocate(size_t block);
  void release_cache_locked();

  CpuAllocatorOptions options_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> cached blocks
  int64_t cached_ = 0;                         // Σ size classes in free_
  int64_t in_use_ = 0;                         // Σ size classes handed out
  std::atomic<int64_t> fail_countdown_{-1};    // fail_allocation_after; -1: off
};

}  // namespace pipewright
