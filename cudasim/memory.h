// Simulated device memory: tagged host memory. Every cudaMalloc is its own posix_memalign block
// of the exact size (so AddressSanitizer's redzones catch a kernel indexing past the end),
// registered with its device and the backtrace that allocated it. Freed blocks are poisoned
// (0xFF bytes: NaN as float/double; ASan-poisoned too) and kept in a bounded quarantine so a
// stale pointer is recognised as "freed (allocated at …, freed at …)" instead of as host memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "cudasim/race.h"

namespace cudasim::detail {

struct Allocation {
  uint64_t id = 0;  // unique per cudaMalloc; keys the race detector's shadow state
  char* base = nullptr;
  size_t size = 0;
  int device = 0;
  Backtrace allocated_at;
  Backtrace freed_at;
  bool freed = false;

  /// "device 1 allocation 0x... (4096 B)"; with_sites adds the allocation/free backtraces.
  std::string describe(bool with_sites) const;
};

/// The registry of device allocations. Not thread-safe: the runtime holds its lock.
class MemoryRegistry {
 public:
  static constexpr size_t kQuarantineBlocks = 4096;
  static constexpr size_t kQuarantineBytes = size_t{256} << 20;

  explicit MemoryRegistry(int devices) : used_(static_cast<size_t>(devices), 0) {}

  /// Allocates `size` (> 0) bytes on `device` when that keeps the device's live bytes within
  /// `limit`; returns nullptr when it would not or the host is out of memory.
  const Allocation* allocate(int device, size_t size, size_t limit);

  /// The live allocation containing p, or nullptr. include_end: p == base + size counts too
  /// (a kernel's pointer to an empty range at the end; host memory can start right there).
  const Allocation* find_live(const void* p, bool include_end = false) const;

  /// The quarantined (freed) allocation containing p, or nullptr.
  const Allocation* find_freed(const void* p) const;

  /// The live allocation whose base is exactly p, or nullptr.
  const Allocation* find_base(const void* p) const;

  /// Poisons and quarantines the live allocation at base `p` (must exist); returns its id.
  uint64_t release(const void* p);

  size_t used(int device) const { return used_[static_cast<size_t>(device)]; }

 private:
  static const Allocation* containing(const std::map<uintptr_t, Allocation>& m, const void* p,
                                      bool include_end);
  void evict_quarantine();

  uint64_t next_id_ = 1;
  std::map<uintptr_t, Allocation> live_;
  std::map<uintptr_t, Allocation> freed_;
  std::deque<uintptr_t> quarantine_order_;
  size_t quarantine_bytes_ = 0;
  std::vector<size_t> used_;
};

}  // namespace cudasim::detail
