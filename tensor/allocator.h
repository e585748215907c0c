// Allocator: per-device memory with exact byte counters.
//
// Every device (each virtual CPU device, each GPU) has exactly one Allocator, reached through
// allocator_for(device). Counters are exact and deterministic, so tests may assert them:
//   allocated()  bytes handed out and not yet returned (requested sizes, not rounded),
//   peak()       the maximum of allocated() since construction or the last reset_peak(),
//   reserved()   bytes held from the system: blocks in use (rounded to their size class)
//                plus freed blocks a caching allocator keeps for reuse (the CUDA one, and the
//                CPU one of tensor/cpu_allocator.h unless caching is off; without caching
//                reserved() == allocated()). Always >= allocated().
// Counters are atomics: several threads may allocate on one device at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tensor/device.h"

namespace pipewright {

class Allocator {
 public:
  explicit Allocator(Device device) : device_(device) {}
  virtual ~Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  /// Returns memory for `bytes` bytes (64-byte aligned on CPU; nullptr for 0 bytes).
  /// `stream` is the device stream that will use it (CUDA caching: stream-aware reuse;
  /// ignored on CPU). Throws std::bad_alloc (CPU) or a CudaError naming the size when out of memory.
  virtual void* allocate(size_t bytes, void* stream = nullptr) = 0;
  /// Returns memory obtained from allocate() with the same `bytes`.
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  /// Frees cached, unused blocks back to the system (no-op without a cache).
  virtual void empty_cache() {}

  Device device() const { return device_; }
  int64_t allocated() const { return allocated_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  virtual int64_t reserved() const { return allocated(); }
  /// Sets peak() to the current allocated().
  void reset_peak() { peak_.store(allocated(), std::memory_order_relaxed); }

 protected:
  /// Subclasses call these with the requested byte count.
  void count_alloc(size_t bytes);
  void count_free(size_t bytes);

 private:
  Device device_;
  std::atomic<int64_t> allocated_{0};
  std::atomic<int64_t> peak_{0};
};

/// The allocator of `device`. CPU allocators are created on first use for any index >= 0; a
/// CUDA device needs the CUDA runtime registered (built with --config=cuda).
/// Throws std::invalid_argument for a negative index or an unavailable device type.
Allocator& allocator_for(Device device);

/// Allocator factories per device type; the CUDA backend registers its own at start-up.
using AllocatorFactory = Allocator* (*)(Device device);
void register_allocator_factory(DeviceType type, AllocatorFactory factory);

}  // namespace pipewright
