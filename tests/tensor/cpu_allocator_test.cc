// The CPU caching allocator (tensor/cpu_allocator.h, Note [CPU caching allocator]): size
// classes, exact counters under reuse, the cap, empty_cache, alignment, blocks freed on
// other threads, the environment switches, and poisoning of cached blocks under ASan.
// Each test builds its own CpuAllocator, so no other test's tensors change its counters.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "tensor/cpu_allocator.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

using namespace pipewright;

namespace {
bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }
CpuAllocatorOptions caching(size_t max_cached_bytes = size_t{1} << 30) {
  return {.caching = true, .max_cached_bytes = max_cached_bytes};
}
}  // namespace

TEST_CASE("CPU size classes: 64-byte steps to 1 KiB, then four per power of two") {
  const std::vector<std::pair<size_t, size_t>> table = {
      {1, 64},       {64, 64},       {65, 128},      {1000, 1024},     {1024, 1024},
      {1025, 1280},  {1280, 1280},   {1281, 1536},   {1793, 2048},     {2048, 2048},
      {2049, 2560},  {128 << 10, 128 << 10},         {(4 << 20) + 1, 5 << 20},
      {4 << 20, 4 << 20},            {(7 << 20) + 1, 8 << 20}};
  for (const auto& [bytes, expected] : table) {
    INFO("bytes = " << bytes);
    CHECK(CpuAllocator::size_class(bytes) == expected);
  }
  for (size_t bytes = 1; bytes < (1 << 16); bytes = bytes * 3 / 2 + 1) {
    const size_t c = CpuAllocator::size_class(bytes);
    CHECK(c >= bytes);
    CHECK(c % 64 == 0);
    CHECK((bytes <= 1024 || (c - bytes) * 4 < bytes));  // less than a quarter wasted
  }
}

TEST_CASE("CPU caching allocator: exact counters while blocks are reused") {
  CpuAllocator a(Device::cpu(50), caching());
  void* p = a.allocate(100);
  CHECK(aligned64(p));
  CHECK(a.allocated() == 100);
  CHECK(a.reserved() == 128);
  a.deallocate(p, 100);
  CHECK(a.allocated() == 0);
  CHECK(a.cached() == 128);
  CHECK(a.reserved() == 128);       // held, not returned
  void* q = a.allocate(120);        // same class: the cached block comes back
  CHECK(q == p);
  CHECK(a.allocated() == 120);      // requested bytes, not the class
  CHECK(a.peak() == 120);
  CHECK(a.cached() == 0);
  CHECK(a.reserved() == 128);
  void* r = a.allocate(100);        // the class is empty again: a new block
  CHECK(r != q);
  CHECK(a.allocated() == 220);
  CHECK(a.reserved() == 256);
  a.deallocate(q, 120);
  a.deallocate(r, 100);
  CHECK(a.allocated() == 0);
  CHECK(a.peak() == 220);
  CHECK(a.reserved() == 256);
  CHECK(a.cached() == 256);
  a.empty_cache();
  CHECK(a.reserved() == 0);
  CHECK(a.cached() == 0);
  CHECK(a.allocate(0) == nullptr);
  CHECK(a.allocated() == 0);
}

TEST_CASE("CPU caching allocator: large blocks are cached and aligned too") {
  CpuAllocator a(Device::cpu(51), caching());
  const size_t big = (4 << 20) + 12;  // class 5 MiB
  void* p = a.allocate(big);
  CHECK(aligned64(p));
  std::memset(p, 1, big);
  a.deallocate(p, big);
  CHECK(a.cached() == (5 << 20));
  void* q = a.allocate(4 << 20 | 1);  // same class
  CHECK(q == p);
  CHECK(a.reserved() == (5 << 20));
  a.deallocate(q, 4 << 20 | 1);
  a.empty_cache();
  CHECK(a.reserved() == 0);
}

TEST_CASE("CPU caching allocator: the cap sends blocks beyond it back to the system") {
  CpuAllocator a(Device::cpu(52), caching(/*max_cached_bytes=*/1536));
  void* p = a.allocate(1024);
  void* q = a.allocate(1024);
  CHECK(a.reserved() == 2048);
  a.deallocate(p, 1024);
  CHECK(a.cached() == 1024);
  a.deallocate(q, 1024);      // 2048 > 1536: released
  CHECK(a.cached() == 1024);
  CHECK(a.reserved() == 1024);
  CHECK(a.allocated() == 0);
}

TEST_CASE("CPU allocator without caching: memory returned at once, reserved == allocated") {
  CpuAllocator a(Device::cpu(53), {.caching = false});
  void* p = a.allocate(100);
  CHECK(aligned64(p));
  CHECK(a.reserved() == 100);
  a.deallocate(p, 100);
  CHECK(a.reserved() == 0);
  CHECK(a.cached() == 0);
}

TEST_CASE("CPU caching allocator: blocks allocated on one thread, freed on another") {
  CpuAllocator a(Device::cpu(54), caching());
  constexpr int kProducers = 2, kConsumers = 2, kPerProducer = 2000;
  std::mutex mutex;
  std::vector<std::pair<unsigned char*, size_t>> queue;  // allocated, filled, not yet freed
  std::atomic<bool> corrupted{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kProducers; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerProducer; ++i) {
        const size_t bytes = 1 + static_cast<size_t>((i * 7919 + t * 31) % 20000);
        auto* p = static_cast<unsigned char*>(a.allocate(bytes));
        if (!aligned64(p)) corrupted = true;
        std::memset(p, (i + t) & 0xff, bytes);
        std::lock_guard<std::mutex> lock(mutex);
        queue.emplace_back(p, bytes);
      }
    });
  }
  std::atomic<int> freed{0};
  for (int t = 0; t < kConsumers; ++t) {
    threads.emplace_back([&] {
      while (freed.load() < kProducers * kPerProducer) {
        std::pair<unsigned char*, size_t> item{nullptr, 0};
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (queue.empty()) continue;
          item = queue.back();
          queue.pop_back();
        }
        // Every byte still holds the one value its producer wrote: no block was handed out
        // twice while in use.
        for (size_t k = 1; k < item.second; ++k) {
          if (item.first[k] != item.first[0]) corrupted = true;
        }
        a.deallocate(item.first, item.second);
        freed.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK_FALSE(corrupted);
  CHECK(a.allocated() == 0);
  CHECK(a.reserved() == a.cached());
  CHECK(a.peak() > 0);
  a.empty_cache();
  CHECK(a.reserved() == 0);
}

TEST_CASE("CPU allocator options from the environment") {
  unsetenv("PIPEWRIGHT_CPU_CACHING");
  unsetenv("PIPEWRIGHT_CPU_CACHE_MAX_MB");
#if defined(__SANITIZE_ADDRESS__)
  CHECK_FALSE(CpuAllocatorOptions::from_environment().caching);  // ASan sees every free
#else
  CHECK(CpuAllocatorOptions::from_environment().caching);
#endif
  CHECK(CpuAllocatorOptions::from_environment().max_cached_bytes == (size_t{1} << 30));
  setenv("PIPEWRIGHT_CPU_CACHING", "0", 1);
  CHECK_FALSE(CpuAllocatorOptions::from_environment().caching);
  setenv("PIPEWRIGHT_CPU_CACHING", "1", 1);
  CHECK(CpuAllocatorOptions::from_environment().caching);
  setenv("PIPEWRIGHT_CPU_CACHE_MAX_MB", "5", 1);
  CHECK(CpuAllocatorOptions::from_environment().max_cached_bytes == (size_t{5} << 20));
  setenv("PIPEWRIGHT_CPU_CACHING", "yes", 1);
  CHECK_THROWS_WITH(CpuAllocatorOptions::from_environment(),
                    Catch::Contains("PIPEWRIGHT_CPU_CACHING=yes"));
  setenv("PIPEWRIGHT_CPU_CACHING", "2", 1);
  CHECK_THROWS_WITH(CpuAllocatorOptions::from_environment(),
                    Catch::Contains("PIPEWRIGHT_CPU_CACHING=2") && Catch::Contains("0 (off)"));
  unsetenv("PIPEWRIGHT_CPU_CACHING");
  setenv("PIPEWRIGHT_CPU_CACHE_MAX_MB", "-3", 1);
  CHECK_THROWS_WITH(CpuAllocatorOptions::from_environment(),
                    Catch::Contains("PIPEWRIGHT_CPU_CACHE_MAX_MB=-3"));
  unsetenv("PIPEWRIGHT_CPU_CACHE_MAX_MB");
}

TEST_CASE("every CPU device's allocator is a CpuAllocator") {
  CHECK(dynamic_cast<CpuAllocator*>(&allocator_for(Device::cpu(55))) != nullptr);
}

#if defined(__SANITIZE_ADDRESS__)
TEST_CASE("ASan: a cached block is poisoned until it is handed out again") {
  CpuAllocator a(Device::cpu(56), caching());
  auto* p = static_cast<char*>(a.allocate(256));
  CHECK(__asan_address_is_poisoned(p) == 0);
  a.deallocate(p, 256);
  CHECK(__asan_address_is_poisoned(p) != 0);  // a stale read here would be reported
  CHECK(__asan_address_is_poisoned(p + 255) != 0);
  CHECK(a.allocate(256) == p);
  CHECK(__asan_address_is_poisoned(p) == 0);
  a.deallocate(p, 256);
  a.empty_cache();
}
#endif
