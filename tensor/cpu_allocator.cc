// CpuAllocator (see cpu_allocator.h, Note [CPU caching allocator]).
#include "tensor/cpu_allocator.h"

#include <bit>
#include <cerrno>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define PW_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define PW_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
constexpr bool kAddressSanitizer = true;
#else
#define PW_POISON(p, n) ((void)(p), (void)(n))
#define PW_UNPOISON(p, n) ((void)(p), (void)(n))
constexpr bool kAddressSanitizer = false;
#endif

namespace pipewright {
namespace {

constexpr size_t kAlignment = 64;  // one cache line; enough for any SIMD load

/// The value of environment variable `name` as a non-negative integer, or `fallback` when unset.
uint64_t env_uint(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || text[0] == '-') {
    throw std::invalid_argument(std::string(name) + "=" + text +
                                ": expected a non-negative integer");
  }
  return value;
}

}  // namespace

CpuAllocatorOptions CpuAllocatorOptions::from_environment() {
  CpuAllocatorOptions o;
  o.caching = !kAddressSanitizer;
  const uint64_t caching = env_uint("PIPEWRIGHT_CPU_CACHING", o.caching ? 1 : 0);
  if (caching > 1) {
    throw std::invalid_argument("PIPEWRIGHT_CPU_CACHING=" + std::to_string(caching) +
                                ": expected 0 (off) or 1 (on)");
  }
  o.caching = caching == 1;
  o.max_cached_bytes = env_uint("PIPEWRIGHT_CPU_CACHE_MAX_MB", o.max_cached_bytes >> 20) << 20;
  return o;
}

size_t CpuAllocator::size_class(size_t bytes) {
  if (bytes <= 1024) return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  // 2^k < bytes <= 2^(k+1): round up to a multiple of 2^k / 4 (>= 256, so 64-aligned).
  const int k = static_cast<int>(std::bit_width(bytes - 1)) - 1;
  const size_t step = (size_t{1} << k) / 4;
  return (bytes + step - 1) / step * step;
}

CpuAllocator::CpuAllocator(Device device, CpuAllocatorOptions options)
    : Allocator(device), options_(options) {}

CpuAllocator::~CpuAllocator() { empty_cache(); }

void* CpuAllocator::system_allocate(size_t block) {
  void* ptr = std::aligned_alloc(kAlignment, block);
  if (ptr == nullptr && options_.caching) {
    // Out of memory: what the cache holds may be what the system is missing.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      release_cache_locked();
    }
    ptr = std::aligned_alloc(kAlignment, block);
  }
  if (ptr == nullptr) throw std::bad_alloc();
  return ptr;
}

void* CpuAllocator::allocate(size_t bytes, void* /*stream*/) {
  if (bytes == 0) return nullptr;
  for (int64_t c = fail_countdown_.load(); c >= 0;) {  // fail_allocation_after (a test seam)
    if (fail_countdown_.compare_exchange_weak(c, c - 1)) {
      if (c == 0) throw std::bad_alloc();
      break;
    }
  }
  const size_t block = size_class(bytes);
  void* ptr = nullptr;
  if (options_.caching) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = free_.find(block); it != free_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      cached_ -= static_cast<int64_t>(block);
      in_use_ += static_cast<int64_t>(block);
      PW_UNPOISON(ptr, block);
    }
  }
  if (ptr == nullptr) {
    ptr = system_allocate(block);
    if (options_.caching) {
      std::lock_guard<std::mutex> lock(mutex_);
      in_use_ += static_cast<int64_t>(block);
    }
  }
  count_alloc(bytes);
  return ptr;
}

void CpuAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  count_free(bytes);
  if (!options_.caching) {
    std::free(ptr);
    return;
  }
  const size_t block = size_class(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ -= static_cast<int64_t>(block);
    if (static_cast<size_t>(cached_) + block <= options_.max_cached_bytes) {
      free_[block].push_back(ptr);
      cached_ += static_cast<int64_t>(block);
      PW_POISON(ptr, block);
      return;
    }
  }
  std::free(ptr);
}

void CpuAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cache_locked();
}

void CpuAllocator::release_cache_locked() {
  for (auto& [block, blocks] : free_) {
    for (void* ptr : blocks) {
      PW_UNPOISON(ptr, block);
      std::free(ptr);
    }
  }
  free_.clear();
  cached_ = 0;
}

int64_t CpuAllocator::reserved() const {
  if (!options_.caching) return allocated();
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_ + cached_;
}

int64_t CpuAllocator::cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

}  // namespace pipewright
