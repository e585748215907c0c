// PinnedStaging: host-to-GPU copies from pageable memory made asynchronous.
//
// Note [Pinned staging]
// What the CPU allocator hands out is pageable memory, and a cudaMemcpyAsync from pageable
// memory is not asynchronous: the driver copies the bytes through a pinned buffer of its own
// and the call returns only when they have been taken, so the host waits for the DMA. The
// backend does that staging itself instead, with a pool of pinned (page-locked) blocks:
//
//   host:   memcpy(block, src) ─ cudaMemcpyAsync(dst, block) ─ record E ─► returns at once
//   stream:                      └──────────── DMA ───────────┘ E
//   later:  the block is handed out again once E has completed (cudaEventQuery, no wait)
//
// The host's memcpy is what the driver would have done; the DMA itself now overlaps the host's
// next work. Blocks come in power-of-two size classes per GPU (an event belongs to its GPU),
// so after the first steps of a training loop every copy finds a free block: no cudaMallocHost
// in a warm step. Copies over kMaxStagedBytes (a data set moved once) go direct.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace pipewright::cuda {

class PinnedStaging {
 public:
  static constexpr size_t kMinBlock = size_t{64} << 10;       // 64 KiB
  static constexpr size_t kMaxStagedBytes = size_t{64} << 20;  // 64 MiB

  PinnedStaging() = default;
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  /// Never called for the process-wide instance (it outlives every stream).
  ~PinnedStaging();

  /// Copies `bytes` from pageable host memory `src` to `dst` on GPU `device`, on `stream` (a
  /// stream of `device`), through a pinned block (Note [Pinned staging]); `src` may be reused
  /// as soon as this returns. Throws CudaError when a CUDA call fails.
  void copy_to_device(void* dst, const void* src, size_t bytes, int device, cudaStream_t stream);

  /// Pinned blocks made so far (cudaMallocHost calls), for tests.
  int64_t blocks_made() const;

  /// The size class of a staged copy of `bytes` bytes.
  static size_t block_size(size_t bytes);

 private:
  struct Block {
    void* ptr = nullptr;
    cudaEvent_t done = nullptr;  // recorded after the block's last copy
  };
  using Key = std::pair<int, size_t>;  // (GPU, size class)

  Block acquire(int device, size_t size);  // mutex held

  mutable std::mutex mutex_;
  std::map<Key, std::vector<Block>> blocks_;  // per class; any may still be in flight
  int64_t made_ = 0;
};

/// The process-wide staging pool the CUDA backend copies through.
PinnedStaging& pinned_staging();

}  // namespace pipewright::cuda
