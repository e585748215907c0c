// Allocator counters are exact, so these tests assert them. Each test uses its own virtual CPU
// device index: every device has its own allocator and counters.
#include <catch2/catch.hpp>
#include <cstdint>
#include <thread>
#include <vector>

#include "tensor/allocator.h"
#include "tensor/storage.h"
#include "tensor/tensor.h"

using namespace pipewright;

TEST_CASE("CPU allocator counts requested bytes and returns 64-byte aligned memory") {
  Allocator& a = allocator_for(Device::cpu(11));
  REQUIRE(a.device() == Device::cpu(11));
  REQUIRE(a.allocated() == 0);
  void* p = a.allocate(100);
  void* q = a.allocate(1);
  REQUIRE(reinterpret_cast<uintptr_t>(p) % 64 == 0);
  REQUIRE(reinterpret_cast<uintptr_t>(q) % 64 == 0);
  REQUIRE(a.allocated() == 101);
  REQUIRE(a.reserved() >= 101);  // size classes when caching (cpu_allocator_test.cc)
  REQUIRE(a.peak() == 101);
  a.deallocate(p, 100);
  REQUIRE(a.allocated() == 1);
  REQUIRE(a.peak() == 101);
  a.reset_peak();
  REQUIRE(a.peak() == 1);
  a.deallocate(q, 1);
  REQUIRE(a.allocated() == 0);
  REQUIRE(a.peak() == 1);
  REQUIRE(a.allocate(0) == nullptr);
  REQUIRE(a.allocated() == 0);
}

TEST_CASE("one allocator per device, created lazily, also beyond the fast slots") {
  REQUIRE(&allocator_for(Device::cpu(12)) == &allocator_for(Device::cpu(12)));
  REQUIRE(&allocator_for(Device::cpu(12)) != &allocator_for(Device::cpu(13)));
  Allocator& far = allocator_for(Device::cpu(1000));
  REQUIRE(&far == &allocator_for(Device::cpu(1000)));
  REQUIRE(far.device() == Device::cpu(1000));
  REQUIRE_THROWS_WITH(allocator_for(Device::cpu(-1)), Catch::Contains("cpu:-1"));
}

TEST_CASE("concurrent first use of a device yields one allocator") {
  for (int index : {20, 200}) {
    std::vector<Allocator*> seen(8);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < seen.size(); ++t) {
      threads.emplace_back([&, t] { seen[t] = &allocator_for(Device::cpu(index)); });
    }
    for (auto& th : threads) th.join();
    for (Allocator* a : seen) REQUIRE(a == seen[0]);
  }
}

TEST_CASE("concurrent allocations keep exact counters") {
  Allocator& a = allocator_for(Device::cpu(21));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) a.deallocate(a.allocate(24), 24);
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(a.allocated() == 0);
  REQUIRE(a.peak() >= 24);
  REQUIRE(a.peak() <= 4 * 24);
}

TEST_CASE("Storage and tensors allocate through their device's allocator") {
  Allocator& a = allocator_for(Device::cpu(22));
  {
    Storage s(40, Device::cpu(22));
    REQUIRE(s.nbytes() == 40);
    REQUIRE(s.device() == Device::cpu(22));
    REQUIRE(a.allocated() == 40);
  }
  REQUIRE(a.allocated() == 0);
  Tensor t = Tensor::zeros({3, 5}, {DType::kFloat64, Device::cpu(22)});
  REQUIRE(a.allocated() == 3 * 5 * 8);
  {
    Tensor view = t.slice(1, 2);  // views share the storage: no new bytes
    Tensor again = t.reshape({15});
    REQUIRE(a.allocated() == 120);
    t = Tensor();
    REQUIRE(a.allocated() == 120);  // still held by the views
  }
  REQUIRE(a.allocated() == 0);
  REQUIRE(a.peak() == 120);
}

namespace {
/// Host memory pretending to be a GPU's, to check register_allocator_factory.
class FakeDeviceAllocator final : public Allocator {
 public:
  using Allocator::Allocator;
  void* allocate(size_t bytes, void*) override {
    count_alloc(bytes);
    return bytes == 0 ? nullptr : ::operator new(bytes);
  }
  void deallocate(void* ptr, size_t bytes) override {
    count_free(bytes);
    ::operator delete(ptr);
  }
};
Allocator* make_fake(Device d) { return new FakeDeviceAllocator(d); }
}  // namespace

TEST_CASE("CUDA needs a registered allocator factory") {
  REQUIRE_THROWS_AS(allocator_for(Device::cuda(0)), std::invalid_argument);
  REQUIRE_THROWS_WITH(allocator_for(Device::cuda(0)),
                      Catch::Contains("cuda:0") && Catch::Contains("CUDA is not available") &&
                          Catch::Contains("--config=cuda"));
  register_allocator_factory(DeviceType::kCUDA, &make_fake);
  Allocator& a = allocator_for(Device::cuda(1));
  REQUIRE(dynamic_cast<FakeDeviceAllocator*>(&a) != nullptr);
  REQUIRE(a.device() == Device::cuda(1));
  a.deallocate(a.allocate(8), 8);
  REQUIRE(a.peak() == 8);
}
