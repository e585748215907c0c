// PW_LAUNCH through the simulated runtime: kernels written as in cuda_kernels/*.cu, launched on
// streams, their configuration checked, their pointer arguments checked and race-detected;
// and two ordering mistakes replayed as deliberately broken code (a cross-GPU copy on the
// destination's stream, a copy stream waiting for one of two sources), so the race detector is
// shown to catch them whatever the library's code does.
#include "cudasim/device.h"  // first, as the cuda_library rule does for .cu files

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tests/cudasim/test_util.h"

namespace {

using cudasim::testing::clean;
using cudasim::testing::DeviceFloats;

__global__ void scale_kernel(const float* x, float* y, int64_t n, float factor) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = x[i] * factor;
  }
}

template <class T>
__global__ void sum_kernel(const T* x, T* out, int64_t n) {  // one block: block-wide sum
  __shared__ T partial[32];
  T v = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) v += x[i];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    T total = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += partial[w];
    *out = total;
  }
}

// A kernel argument that lists its pointers (cudasim/launch.h, each_pointer), as
// cuda_kernels/optim.cu's tensor lists do: `out` written, `in` read, each n floats.
struct CopyList {
  const float* in;
  float* out;
  int64_t n;
  template <class Sink>
  void each_pointer(const Sink& sink) const {
    sink(in, static_cast<size_t>(n) * sizeof(float), false);
    sink(out, static_cast<size_t>(n) * sizeof(float), true);
  }
};

__global__ void copy_list_kernel(CopyList list) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < list.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    list.out[i] = list.in[i];
  }
}

std::vector<float> to_host(const float* device, size_t n, cudaStream_t stream = nullptr) {
  std::vector<float> host(n);
  REQUIRE(cudaMemcpyAsync(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost,
                          stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  return host;
}

void upload(float* device, const std::vector<float>& host, cudaStream_t stream = nullptr) {
  REQUIRE(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(float),
                          cudaMemcpyHostToDevice, stream) == cudaSuccess);
}

std::string last_error_text() {
  const cudaError_t e = cudaGetLastError();
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

}  // namespace

TEST_CASE("a launched kernel runs on its stream, asynchronously, with its arguments copied") {
  clean();
  const int64_t n = 1000;
  DeviceFloats x(n), y(n);
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  upload(x.p, host);
  float factor = 2.0f;
  PW_LAUNCH(scale_kernel, 3, 64, 0, nullptr)(x.p, y.p, n, factor);  // 3 blocks: the loop wraps
  factor = 100.0f;  // the launch copied the argument
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const std::vector<float> out = to_host(y.p, n);
  for (int64_t i = 0; i < n; ++i) CHECK(out[i] == 2.0f * static_cast<float>(i));
}

TEST_CASE("a block reduction kernel with shared memory and shuffles") {
  clean();
  DeviceFloats x(777), out(1);
  upload(x.p, std::vector<float>(777, 0.5f));
  PW_LAUNCH(sum_kernel<float>, 1, 256, 0, nullptr)(x.p, out.p, int64_t{777});
  CHECK(to_host(out.p, 1)[0] == 388.5f);
}

TEST_CASE("a bad launch configuration is cudaErrorInvalidConfiguration and runs nothing") {
  clean();
  DeviceFloats x(4), y(4);
  upload(y.p, std::vector<float>(4, 7.0f));
  const std::vector<std::pair<dim3, dim3>> bad = {
      {dim3(1), dim3(2048)},         {dim3(1), dim3(32, 1, 65)}, {dim3(1, 65536), dim3(32)},
      {dim3(1, 1, 70000), dim3(32)}, {dim3(0), dim3(32)},        {dim3(1), dim3(33, 33)}};
  for (const auto& [grid, block] : bad) {
    PW_LAUNCH(scale_kernel, grid, block, 0, nullptr)(x.p, y.p, int64_t{4}, 0.0f);
    const cudaError_t e = cudaPeekAtLastError();
    INFO(last_error_text());
    CHECK(e == cudaErrorInvalidConfiguration);
    CHECK(std::string(cudaGetErrorString(e)).find("scale_kernel") != std::string::npos);
    (void)cudaGetLastError();
    CHECK(cudaGetLastError() == cudaSuccess);  // not sticky
  }
  CHECK(to_host(y.p, 4) == std::vector<float>(4, 7.0f));
}

TEST_CASE("a kernel given host memory or a freed block is refused with the argument named") {
  clean();
  std::vector<float> host(16, 1.0f);
  DeviceFloats y(16);
  PW_LAUNCH(scale_kernel, 1, 32, 0, nullptr)(host.data(), y.p, int64_t{16}, 1.0f);
  std::string text = last_error_text();
  INFO(text);
  CHECK(text.find("cudaErrorIllegalAddress") != std::string::npos);
  CHECK(text.find("scale_kernel") != std::string::npos);
  clean();
  float* freed = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&freed), 64) == cudaSuccess);
  REQUIRE(cudaFree(freed) == cudaSuccess);
  PW_LAUNCH(scale_kernel, 1, 32, 0, nullptr)(y.p, freed, int64_t{16}, 1.0f);
  text = last_error_text();
  CHECK(text.find("freed") != std::string::npos);
  clean();
}

TEST_CASE("a kernel fault is sticky and names the kernel, block and thread") {
  clean();
  DeviceFloats x(64), out(1);
  upload(x.p, std::vector<float>(64, 1.0f));
  PW_LAUNCH(sum_kernel<float>, 1, 48, 0, nullptr)(x.p, out.p, int64_t{64});  // not 32k threads
  const cudaError_t sync = cudaDeviceSynchronize();
  const std::string text = cudaGetErrorString(sync);
  INFO(text);
  CHECK(sync == cudaErrorLaunchFailure);
  CHECK(text.find("sum_kernel") != std::string::npos);
  CHECK(text.find("not a multiple of 32") != std::string::npos);
  CHECK(cudaMemsetAsync(x.p, 0, 4, nullptr) == cudaErrorLaunchFailure);  // sticky
  clean();
}

TEST_CASE("kernels on two streams: unordered is a race, an event orders them") {
  clean();
  cudaStream_t a, b;
  REQUIRE(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
  DeviceFloats x(256), y(256), z(256);
  upload(x.p, std::vector<float>(256, 3.0f), a);
  PW_LAUNCH(scale_kernel, 2, 64, 0, a)(x.p, y.p, int64_t{256}, 2.0f);  // writes y on a
  PW_LAUNCH(scale_kernel, 2, 64, 0, b)(y.p, z.p, int64_t{256}, 1.0f);  // reads y on b: race
  const cudaError_t e = cudaGetLastError();
  const std::string report = cudaGetErrorString(e);
  CHECK(e == cudaErrorIllegalState);
  CHECK(report.find("scale_kernel") != std::string::npos);
  CHECK(report.find("launch_test.cc") != std::string::npos);  // the PW_LAUNCH sites
  CHECK(cudasim::take_race_reports().size() == 1);
  cudaEvent_t done;
  REQUIRE(cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventRecord(done, a) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(b, done, 0) == cudaSuccess);
  PW_LAUNCH(scale_kernel, 2, 64, 0, b)(y.p, z.p, int64_t{256}, 1.0f);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(to_host(z.p, 256, b) == std::vector<float>(256, 6.0f));
  CHECK(cudasim::take_race_reports().empty());
  REQUIRE(cudaEventDestroy(done) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(a) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(b) == cudaSuccess);
}

// A struct argument's pointers count as reads of whole allocations unless it lists them
// itself: then its writes race with unordered readers, and its accesses end where it says.
TEST_CASE("a struct argument that lists its pointers: its writes race, its extents bound them") {
  clean();
  cudaStream_t a, b;
  REQUIRE(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
  DeviceFloats x(256), y(256), z(256);
  upload(x.p, std::vector<float>(256, 3.0f), a);
  REQUIRE(cudaStreamSynchronize(a) == cudaSuccess);
  // Writes y[0, 128) on a; a reader of y[128, 256) on b touches none of it.
  PW_LAUNCH(copy_list_kernel, 1, 64, 0, a)(CopyList{x.p, y.p, 128});
  PW_LAUNCH(scale_kernel, 1, 64, 0, b)(y.p + 128, z.p, int64_t{128}, 1.0f);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudasim::take_race_reports().empty());
  REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
  // A reader of y[0, 128) on b, unordered with the write: a race naming the list's kernel.
  PW_LAUNCH(scale_kernel, 1, 64, 0, b)(y.p, z.p, int64_t{128}, 1.0f);
  const cudaError_t e = cudaGetLastError();
  CHECK(e == cudaErrorIllegalState);
  CHECK(std::string(cudaGetErrorString(e)).find("copy_list_kernel") != std::string::npos);
  CHECK(cudasim::take_race_reports().size() == 1);
  REQUIRE(cudaStreamSynchronize(a) == cudaSuccess);
  CHECK(to_host(y.p, 128, a) == std::vector<float>(128, 3.0f));
  REQUIRE(cudaStreamDestroy(a) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(b) == cudaSuccess);
}

// A cross-GPU copy on the destination's stream, replayed: x written on cuda:0's current
// (created) stream, then x.to(cuda:1) issued as cudaMemcpyPeerAsync on cuda:1's default
// stream, with no event.
TEST_CASE("a peer copy on the destination's stream, unordered with the source's, is a race") {
  clean();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaStream_t s0;
  REQUIRE(cudaStreamCreate(&s0) == cudaSuccess);
  DeviceFloats x(128);
  PW_LAUNCH(scale_kernel, 1, 128, 0, s0)(x.p, x.p, int64_t{128}, 1.0f);  // pending write of x
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  DeviceFloats y(128);
  const cudaError_t old_way = cudaMemcpyPeerAsync(y.p, 1, x.p, 0, x.bytes(), nullptr);
  CHECK(old_way == cudaErrorIllegalState);
  CHECK(std::string(cudaGetErrorString(old_way)).find("race") != std::string::npos);
  (void)cudaGetLastError();
  CHECK(cudasim::take_race_reports().size() == 1);
  // The fix's ordering: the copy stream waits for an event recorded after the write.
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaEvent_t written;
  REQUIRE(cudaEventCreate(&written) == cudaSuccess);
  REQUIRE(cudaEventRecord(written, s0) == cudaSuccess);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(nullptr, written, 0) == cudaSuccess);
  CHECK(cudaMemcpyPeerAsync(y.p, 1, x.p, 0, x.bytes(), nullptr) == cudaSuccess);
  CHECK(cudasim::take_race_reports().empty());
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaEventDestroy(written) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s0) == cudaSuccess);
}

// A copy stream waiting for one source, replayed: a message carries tensors from cuda:0 and
// cuda:1; one copy stream of cuda:1 waits only for the first source's "ready" event.
TEST_CASE("a copy stream that waits for one of two sources races") {
  clean();
  cudaStream_t producer0, producer1, copy;
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(cudaStreamCreate(&producer0) == cudaSuccess);
  DeviceFloats a(64);
  PW_LAUNCH(scale_kernel, 1, 64, 0, producer0)(a.p, a.p, int64_t{64}, 1.0f);
  cudaEvent_t ready0, ready1;
  REQUIRE(cudaEventCreate(&ready0) == cudaSuccess);
  REQUIRE(cudaEventRecord(ready0, producer0) == cudaSuccess);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  REQUIRE(cudaStreamCreate(&producer1) == cudaSuccess);
  REQUIRE(cudaStreamCreate(&copy) == cudaSuccess);
  DeviceFloats b(64), dst_a(64), dst_b(64);
  PW_LAUNCH(scale_kernel, 1, 64, 0, producer1)(b.p, b.p, int64_t{64}, 1.0f);
  REQUIRE(cudaEventCreate(&ready1) == cudaSuccess);
  REQUIRE(cudaEventRecord(ready1, producer1) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(copy, ready0, 0) == cudaSuccess);  // the old code: one wait only
  CHECK(cudaMemcpyPeerAsync(dst_a.p, 1, a.p, 0, a.bytes(), copy) == cudaSuccess);
  CHECK(cudaMemcpyAsync(dst_b.p, b.p, b.bytes(), cudaMemcpyDeviceToDevice, copy) ==
        cudaErrorIllegalState);
  (void)cudaGetLastError();
  CHECK(cudasim::take_race_reports().size() == 1);
  REQUIRE(cudaStreamWaitEvent(copy, ready1, 0) == cudaSuccess);  // the fix: one per source
  CHECK(cudaMemcpyAsync(dst_b.p, b.p, b.bytes(), cudaMemcpyDeviceToDevice, copy) == cudaSuccess);
  CHECK(cudasim::take_race_reports().empty());
  REQUIRE(cudaStreamSynchronize(copy) == cudaSuccess);
  for (cudaEvent_t e : {ready0, ready1}) REQUIRE(cudaEventDestroy(e) == cudaSuccess);
  for (cudaStream_t s : {producer1, copy}) REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(producer0) == cudaSuccess);
}
