#include "cudasim/memory.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define CUDASIM_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define CUDASIM_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define CUDASIM_POISON(p, n) ((void)(p), (void)(n))
#define CUDASIM_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace cudasim::detail {

std::string Allocation::describe(bool with_sites) const {
  std::ostringstream out;
  out << "device " << device << " allocation " << static_cast<const void*>(base) << " (" << size
      << " B)";
  if (with_sites) {
    out << ", allocated at:\n" << allocated_at.symbolise(/*skip=*/3);
    if (freed) out << "    freed at:\n" << freed_at.symbolise(/*skip=*/3);
  }
  return out.str();
}

const Allocation* MemoryRegistry::allocate(int device, size_t size, size_t limit) {
  size_t& used = used_[static_cast<size_t>(device)];
  if (size == 0 || size > limit || used > limit - size) return nullptr;
  void* p = nullptr;
  if (posix_memalign(&p, 256, size) != 0) return nullptr;
  used += size;
  Allocation a;
  a.id = next_id_++;
  a.base = static_cast<char*>(p);
  a.size = size;
  a.device = device;
  a.allocated_at = Backtrace::capture();
  auto [it, inserted] = live_.emplace(reinterpret_cast<uintptr_t>(p), std::move(a));
  (void)inserted;
  return &it->second;
}

const Allocation* MemoryRegistry::containing(const std::map<uintptr_t, Allocation>& m,
                                             const void* p, bool include_end) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(addr);
  if (it == m.begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  const uintptr_t end = it->first + a.size;
  return addr < end || (include_end && addr == end) ? &a : nullptr;
}

const Allocation* MemoryRegistry::find_live(const void* p, bool include_end) const {
  return containing(live_, p, include_end);
}

const Allocation* MemoryRegistry::find_freed(const void* p) const {
  return containing(freed_, p, /*include_end=*/false);
}

const Allocation* MemoryRegistry::find_base(const void* p) const {
  auto it = live_.find(reinterpret_cast<uintptr_t>(p));
  return it == live_.end() ? nullptr : &it->second;
}

uint64_t MemoryRegistry::release(const void* p) {
  auto it = live_.find(reinterpret_cast<uintptr_t>(p));
  Allocation a = std::move(it->second);
  live_.erase(it);
  used_[static_cast<size_t>(a.device)] -= a.size;
  a.freed = true;
  a.freed_at = Backtrace::capture();
  std::memset(a.base, 0xFF, a.size);
  CUDASIM_POISON(a.base, a.size);
  const uint64_t id = a.id;
  const uintptr_t key = reinterpret_cast<uintptr_t>(a.base);
  quarantine_bytes_ += a.size;
  // An address is unique among live and quarantined blocks: the quarantine still owns it.
  freed_[key] = std::move(a);
  quarantine_order_.push_back(key);
  evict_quarantine();
  return id;
}

void MemoryRegistry::evict_quarantine() {
  while (!quarantine_order_.empty() && (quarantine_order_.size() > kQuarantineBlocks ||
                                        quarantine_bytes_ > kQuarantineBytes)) {
    auto it = freed_.find(quarantine_order_.front());
    quarantine_order_.pop_front();
    quarantine_bytes_ -= it->second.size;
    CUDASIM_UNPOISON(it->second.base, it->second.size);
    std::free(it->second.base);
    freed_.erase(it);
  }
}

}  // namespace cudasim::detail
