// The CUDA code paths of Tensor::to / copy_from, exercised with a fake CUDA backend and
// allocator backed by host memory (this binary registers them for its whole process).
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <string>
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
  int stream_device;
  void* stream;
};

/// Records every call; copies with memcpy. `log` names streams by the names given with
/// name(), events by their creation order ("e1", "e2", ...), blocks as "block".
class FakeCudaBackend final : public DeviceBackend {
 public:
  std::vector<CopyCall> copies;
  std::vector<void*> synchronized;
  std::vector<std::string> log;
  std::map<void*, std::string> names;
  std::string name(void* s) {
    if (s == nullptr) return "default";
    auto it = names.find(s);
    return it == names.end() ? "?" : it->second;
  }
  /// Forgets what was recorded; events are numbered from e1 again.
  void start() {
    copies.clear();
    synchronized.clear();
    log.clear();
    events_ = 0;
  }
  int device_count() override { return 2; }
  void* create_stream(int) override { return new char; }
  void destroy_stream(int, void* s) override { delete static_cast<char*>(s); }
  void synchronize_stream(int d, void* s) override {
    synchronized.push_back(s);
    log.push_back("synchronize cuda:" + std::to_string(d) + "." + name(s));
  }
  void* create_event(int, bool) override {
    char* e = new char;
    names[e] = "e" + std::to_string(++events_);
    return e;
  }
  void destroy_event(int, void* e) override { delete static_cast<char*>(e); }
  void record_event(int d, void* e, void* s) override {
    log.push_back("record " + name(e) + " on cuda:" + std::to_string(d) + "." + name(s));
  }
  void stream_wait_event(int d, void* s, void* e) override {
    log.push_back("cuda:" + std::to_string(d) + "." + name(s) + " waits " + name(e));
  }
  void synchronize_event(int, void*) override {}
  float event_elapsed_ms(int, void*, void*) override { return 0.0f; }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
            int stream_device, void* stream) override {
    copies.push_back({dst_device, src_device, bytes, stream_device, stream});
    log.push_back("copy " + src_device.str() + "->" + dst_device.str() + " on cuda:" +
                  std::to_string(stream_device) + "." + name(stream));
    std::memcpy(dst, src, bytes);
  }
  void record_stream(int d, void*, int sd, void* s) override {
    log.push_back("record_stream block of cuda:" + std::to_string(d) + " on cuda:" +
                  std::to_string(sd) + "." + name(s));
  }

 private:
  int events_ = 0;
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

// The backend's copy into host memory returns with the bytes there (DeviceBackend::copy): the
// copy is the one wait, no stream synchronisation follows it.
TEST_CASE("CUDA -> CPU copies on the source's current stream, which the backend's copy waits for") {
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
  REQUIRE(b.synchronized.empty());
  Tensor host = Tensor::zeros({2}, {DType::kFloat64, Device::cpu(3)});
  host.copy_from(dev);
  REQUIRE(host.to_vector<double>() == std::vector<double>{4, 5});
  REQUIRE(b.copies.size() == 2);
  REQUIRE(b.synchronized.empty());
}

TEST_CASE("device_count reports the registered backend") {
  fake();
  REQUIRE(device_count(DeviceType::kCUDA) == 2);
  REQUIRE(&backend_for(DeviceType::kCUDA) == &fake());
}

// Note [Copies between devices] (tensor.cc).
TEST_CASE("CUDA -> CUDA copies on the source's current stream between both current streams") {
  FakeCudaBackend& b = fake();
  register_kernels(DeviceType::kCUDA, &fake_kernels());
  const Stream s0 = Stream::create(Device::cuda(0)), s1 = Stream::create(Device::cuda(1));
  b.names[s0.handle()] = "s0";
  b.names[s1.handle()] = "s1";
  StreamGuard on_s0(s0), on_s1(s1);
  const Tensor x = Tensor::full({4}, 1.5, {DType::kFloat32, Device::cuda(0)});
  b.start();
  const Tensor y = x.to(Device::cuda(1));
  REQUIRE(y.to_vector<float>() == std::vector<float>(4, 1.5f));  // (logs its own D2H copy)
  CHECK(b.log == std::vector<std::string>{
      "record e1 on cuda:1.s1",                         // pending work on the destination
      "cuda:0.s0 waits e1",                             // ...comes before the copy,
      "copy cuda:0->cuda:1 on cuda:0.s0",               // on the source's current stream
      "record_stream block of cuda:0 on cuda:0.s0",     // x and y are used there
      "record_stream block of cuda:1 on cuda:0.s0",
      "record e2 on cuda:0.s0",
      "cuda:1.s1 waits e2",                             // users of y on s1 come after it
      "copy cuda:1->cpu:0 on cuda:1.s1",                // to_vector: D2H on y's stream,
  });                                                   // which the copy itself waits for
  CHECK(b.synchronized.empty());
}

TEST_CASE("CUDA -> CUDA on default streams runs on the source's default stream") {
  FakeCudaBackend& b = fake();
  register_kernels(DeviceType::kCUDA, &fake_kernels());
  const Tensor x = Tensor::full({2}, 3.0, {DType::kFloat32, Device::cuda(0)});
  b.start();
  Tensor y = Tensor::zeros({2}, {DType::kFloat32, Device::cuda(1)});
  y.copy_from(x);
  REQUIRE(b.copies.size() == 1);
  // cuda:0's legacy default stream: the backend needs the device to tell it from cuda:1's.
  CHECK(b.copies[0].stream_device == 0);
  CHECK(b.copies[0].stream == nullptr);
  CHECK(b.log == std::vector<std::string>{
      "record e1 on cuda:1.default", "cuda:0.default waits e1",
      "copy cuda:0->cuda:1 on cuda:0.default",
      "record_stream block of cuda:0 on cuda:0.default",
      "record_stream block of cuda:1 on cuda:0.default",
      "record e2 on cuda:0.default", "cuda:1.default waits e2"});
}
