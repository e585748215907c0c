// The CUDA DeviceBackend through tensor/'s Stream, Event and Tensor API: device counting,
// kernels issued on a StreamGuard's stream, event ordering between streams, timing, peer
// copies (with two GPUs), and CudaError messages.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <iostream>
#include <string>
#include <type_traits>

#include "cuda_kernels/check.h"
#include "tensor/stream.h"
#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

TEST_CASE("PW_CUDA_CHECK throws CudaError with file:line and the CUDA text", "[cuda][check]") {
  // Needs no GPU: the status is given, not obtained from a device.
  try {
    PW_CUDA_CHECK(cudaErrorMemoryAllocation);
    FAIL("no exception");
  } catch (const cuda::CudaError& e) {
    const std::string what = e.what();
    CHECK(what.find("backend_test.cc:") != std::string::npos);
    CHECK(what.find("cudaErrorMemoryAllocation") != std::string::npos);
    CHECK(what.find("out of memory") != std::string::npos);
    CHECK(e.code() == static_cast<int>(cudaErrorMemoryAllocation));
  }
  CHECK_THROWS_AS(PW_CUDA_CHECK(CUBLAS_STATUS_NOT_INITIALIZED), cuda::CudaError);
  CHECK_NOTHROW(PW_CUDA_CHECK(cudaSuccess));
  static_assert(std::is_base_of_v<std::runtime_error, cuda::CudaError>);
}

TEST_CASE("device_count reports the GPUs", "[cuda][backend]") {
  if (!gpu_available_or_skip()) return;
  int expected = 0;
  PW_CUDA_CHECK(cudaGetDeviceCount(&expected));
  CHECK(device_count(DeviceType::kCUDA) == expected);
}

TEST_CASE("ops run on the StreamGuard's stream and events order two streams",
          "[cuda][backend]") {
  if (!gpu_available_or_skip()) return;
  const Stream producer = Stream::create(gpu()), consumer = Stream::create(gpu());
  CHECK(producer.handle() != nullptr);
  CHECK(producer.handle() != consumer.handle());
  const Tensor x_host = random_tensor({1 << 20}, DType::kFloat32, 101);
  Tensor x, y;
  Event ready(gpu());
  {
    StreamGuard guard(producer);
    CHECK(Stream::current(gpu()).handle() == producer.handle());
    x = x_host.to(gpu());
    y = Tensor::empty(x.shape(), {DType::kFloat32, gpu()});
    gpu_kernels().unary(UnaryOp::kSquare, x, y);
    ready.record();  // on producer
  }
  Tensor z;
  {
    StreamGuard guard(consumer);
    ready.wait(consumer);  // consumer waits for the square, without blocking the host
    z = Tensor::empty(x.shape(), {DType::kFloat32, gpu()});
    gpu_kernels().unary(UnaryOp::kSqrt, y, z);
    consumer.synchronize();
  }
  Tensor expected_abs = Tensor::empty(x_host.shape());
  cpu_kernels().unary(UnaryOp::kAbs, x_host, expected_abs);
  check_close(z, expected_abs, 1e-6, 1e-7);
}

TEST_CASE("events time GPU work", "[cuda][backend]") {
  if (!gpu_available_or_skip()) return;
  const Stream stream = Stream::create(gpu());
  StreamGuard guard(stream);
  Event start(gpu(), /*timing=*/true), end(gpu(), /*timing=*/true);
  const auto host_begin = std::chrono::steady_clock::now();
  start.record();
  Tensor a = Tensor::ones({1024, 1024}, {DType::kFloat32, gpu()});
  Tensor c = Tensor::empty({1024, 1024}, {DType::kFloat32, gpu()});
  gpu_kernels().gemm(false, false, 1.0, a, a, 0.0, c);
  end.record();
  end.synchronize();
  const double host_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_begin)
          .count();
  const float ms = start.elapsed_ms(end);
  // The events lie inside the host's interval around them (no wall-clock constant: that
  // would depend on the device, or on a sanitizer's slowdown under cudasim).
  CHECK(ms > 0.0f);
  CHECK(ms <= host_ms + 0.01);
  CHECK(c.slice(0, 1).to(Device::cpu(0)).to_vector<float>()[0] == 1024.0f);
}

TEST_CASE("peer copies between two GPUs", "[cuda][backend]") {
  if (!gpus_available_or_skip(2)) return;
  const Tensor host = random_tensor({12345}, DType::kFloat64, 102);
  const Tensor on1 = host.to(Device::cuda(0)).to(Device::cuda(1));
  CHECK(on1.device() == Device::cuda(1));
  check_bitwise_equal(on1.to(Device::cuda(0)), host);
}

TEST_CASE("a bad device index is a CudaError, not a crash", "[cuda][backend]") {
  if (!gpu_available_or_skip()) return;
  const int past_the_end = device_count(DeviceType::kCUDA);
  CHECK_THROWS_AS(Tensor::empty({4}, {DType::kFloat32, Device::cuda(past_the_end)}),
                  cuda::CudaError);
}

}  // namespace
}  // namespace pipewright::testing
