#include <catch2/catch.hpp>
#include <thread>

#include "tensor/stream.h"

using namespace pipewright;

TEST_CASE("the CPU backend is built in; CUDA needs a CUDA build") {
  REQUIRE(device_count(DeviceType::kCPU) == (1 << 20));
  REQUIRE(device_count(DeviceType::kCUDA) == 0);
  REQUIRE_THROWS_AS(backend_for(DeviceType::kCUDA), std::runtime_error);
  REQUIRE_THROWS_WITH(backend_for(DeviceType::kCUDA),
                      "no backend for cuda: built without --config=cuda");
  char src[4] = {1, 2, 3, 4}, dst[4] = {};
  backend_for(DeviceType::kCPU).copy(dst, Device::cpu(1), src, Device::cpu(0), 4, 1, nullptr);
  REQUIRE(std::equal(src, src + 4, dst));
}

TEST_CASE("the current stream is the default until a guard changes it") {
  const Device d = Device::cpu(0);
  REQUIRE(Stream::current(d).handle() == nullptr);
  REQUIRE(Stream::current(d).device() == d);
  const Stream s1 = Stream::create(d), s2 = Stream::create(d);
  REQUIRE(s1.handle() != nullptr);
  REQUIRE(s1.handle() != s2.handle());
  {
    StreamGuard g1(s1);
    REQUIRE(Stream::current(d).handle() == s1.handle());
    REQUIRE(Stream::current(Device::cpu(1)).handle() == nullptr);  // per device
    {
      StreamGuard g2(s2);
      REQUIRE(Stream::current(d).handle() == s2.handle());
      std::thread([&] { REQUIRE(Stream::current(d).handle() == nullptr); }).join();  // per thread
    }
    REQUIRE(Stream::current(d).handle() == s1.handle());
  }
  REQUIRE(Stream::current(d).handle() == nullptr);
  s1.synchronize();
  Stream::default_stream(d).synchronize();
}

TEST_CASE("a stream lives as long as its last handle, even as the current stream") {
  const Device d = Device::cpu(2);
  void* handle = nullptr;
  {
    StreamGuard guard(Stream::create(d));  // the temporary's only copy is the current stream
    handle = Stream::current(d).handle();
    REQUIRE(handle != nullptr);
  }
  REQUIRE(Stream::current(d).handle() == nullptr);
}

TEST_CASE("CPU events are always complete") {
  const Device d = Device::cpu(0);
  Event start(d, /*timing=*/true), end(d, /*timing=*/true);
  start.record();
  end.record(Stream::create(d));
  end.wait(Stream::current(d));
  end.synchronize();
  REQUIRE(start.elapsed_ms(end) == 0.0f);
  REQUIRE(start.device() == d);
  Event moved(std::move(start));
  moved.record();
  Event assigned(Device::cpu(0));
  assigned = std::move(moved);
  assigned.synchronize();
  REQUIRE_THROWS_WITH(end.record(Stream::create(Device::cpu(1))),
                      Catch::Contains("cpu:0") && Catch::Contains("cpu:1"));
  REQUIRE_THROWS_AS(Event(Device::cuda(0)), std::runtime_error);
}
