// The CUDA code paths of Tensor::to / copy_from, exercised with a fake CUDA backend and
// allocator backed by host memory (this binary registers them for its whole process).
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "tensor/allocator.h"
#include "tensor/kernels.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

using namespace pipewright;

namespace {

struct CopyCall {
  Device dst, src;
  size_t bytes;
  void* stream;
};

/// Records every call; copies with memcpy.
class FakeCudaBackend final : public DeviceBackend {
 public:
  std::vector<CopyCall> copies;
  std::vector<void*> synchronized;
  int device_count() override { return 2; }
  void* create_stream(int) override { return new char; }
  void destroy_stream(int, void* s) override { delete static_cast<char*>(s); }
  void synchronize_stream(int, void* s) override { synchronized.push_back(s); }
  void* create_event(int) override { return nullptr; }
  void destroy_event(int, void*) override {}
  void record_event(int, void*, void*) override {}
  void stream_wait_event(int, void*, void*) override {}
  void synchronize_event(int, void*) override {}
  float event_elapsed_ms(int, void*, void*) override { return 0.0f; }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
            void* stream) override {
    copies.push_back({dst_device, src_device, bytes, stream});
    std::memcpy(dst, src, bytes);
  }
};

class HostAllocator final : public Allocator {
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

/// A CUDA kernel table with only `fill` (on host memory, like the fake allocator).
const Kernels& fake_kernels() {
  static const Kernels table = [] {
    Kernels k;
    k.fill = [](Tensor& out, double value) {
      float* p = out.data<float>();
      for (int64_t i = 0; i < out.numel(); ++i) p[i] = static_cast<float>(value);
    };
    return k;
  }();
  return table;
}

FakeCudaBackend& fake() {
  static FakeCudaBackend* backend = [] {
    auto* b = new FakeCudaBackend();
    register_backend(DeviceType::kCUDA, b);
    register_allocator_factory(DeviceType::kCUDA, [](Device d) -> Allocator* {
      return new HostAllocator(d);
    });
    return b;
  }();
  return *backend;
}

}  // namespace

TEST_CASE("kernel tables: an unregistered type names the op and device; registration installs") {
  REQUIRE_THROWS_AS(PW_KERNEL(Device::cuda(0), gemm), std::runtime_error);
  REQUIRE_THROWS_WITH(PW_KERNEL(Device::cuda(0), gemm), "op gemm has no kernel for cuda:0");
  REQUIRE(kernels_for(DeviceType::kCPU).gemm != nullptr);
  fake();
  register_kernels(DeviceType::kCUDA, &fake_kernels());
  const Tensor t = Tensor::full({3}, 2.5, {DType::kFloat32, Device::cuda(0)});
  REQUIRE(t.to_vector<float>() == std::vector<float>(3, 2.5f));
  REQUIRE_THROWS_WITH(PW_KERNEL(Device::cuda(1), softmax), "op softmax has no kernel for cuda:1");
}

TEST_CASE("CPU -> CUDA copies on the destination's current stream without synchronizing") {
  FakeCudaBackend& b = fake();
  b.copies.clear();
  b.synchronized.clear();
  const Stream s = Stream::create(Device::cuda(1));
  StreamGuard guard(s);
  const Tensor host = Tensor::from_vector<float>({1, 2, 3});
  const Tensor dev = host.to(Device::cuda(1));
  REQUIRE(dev.device() == Device::cuda(1));
  REQUIRE(allocator_for(Device::cuda(1)).allocated() == 12);
  REQUIRE(b.copies.size() == 1);
  REQUIRE(b.copies[0].stream == s.handle());
  REQUIRE(b.copies[0].bytes == 12);
  REQUIRE(b.synchronized.empty());
}

TEST_CASE("CUDA -> CPU copies on the source's current stream, then synchronizes it") {
  FakeCudaBackend& b = fake();
  const Tensor dev = Tensor::from_vector<double>({4, 5}, Device::cuda(0));
  b.copies.clear();
  b.synchronized.clear();
  const Stream s = Stream::create(Device::cuda(0));
  StreamGuard guard(s);
  REQUIRE(dev.to_vector<double>() == std::vector<double>{4, 5});  // to_vector goes through to()
  REQUIRE(b.copies.size() == 1);
  REQUIRE(b.copies[0].src == Device::cuda(0));
  REQUIRE(b.copies[0].dst == Device::cpu(0));
  REQUIRE(b.copies[0].stream == s.handle());
  REQUIRE(b.synchronized == std::vector<void*>{s.handle()});
  Tensor host = Tensor::zeros({2}, {DType::kFloat64, Device::cpu(3)});
  host.copy_from(dev);
  REQUIRE(host.to_vector<double>() == std::vector<double>{4, 5});
  REQUIRE(b.synchronized.size() == 2);
}

TEST_CASE("device_count reports the registered backend") {
  fake();
  REQUIRE(device_count(DeviceType::kCUDA) == 2);
  REQUIRE(&backend_for(DeviceType::kCUDA) == &fake());
}
