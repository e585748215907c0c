// PW_CUDA_CHECK_LAUNCH and PW_CUDA_REPORT (cuda_kernels/check.h) on simulated GPUs: a failed
// launch and, under PIPEWRIGHT_CUDA_SYNC=1 (Note [Synchronous launches]), a fault while the
// kernel runs are thrown at the launch site naming the kernel; a call that must not throw
// reports its failure on stderr.
#include "cudasim/device.h"  // first, as the cuda_library rule does for .cu files

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_kernels/check.h"
#include "tests/cudasim/test_util.h"

namespace {

using cudasim::testing::clean;
using cudasim::testing::DeviceFloats;
using pipewright::cuda::CudaError;

__global__ void scale_kernel(const float* x, float* y, int64_t n, float factor) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = x[i] * factor;
  }
}

// A warp shuffle: with a block of 48 threads the second warp is partial, a fault while the
// kernel runs (the launch itself is valid).
__global__ void shuffle_kernel(const float* x, float* out) {
  float v = x[threadIdx.x];
  v += __shfl_down_sync(0xffffffffu, v, 1);
  if (threadIdx.x == 0) *out = v;
}

// What PW_CUDA_CHECK_LAUNCH threw, or "" when it did not.
template <class F>
std::string thrown_by(F&& f) {
  try {
    f();
  } catch (const CudaError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a failed launch is thrown at its launch site, naming the kernel") {
  clean();
  std::vector<float> host(16, 1.0f);
  DeviceFloats y(16);
  PW_LAUNCH(scale_kernel, 1, 32, 0, nullptr)(host.data(), y.p, int64_t{16}, 1.0f);  // host memory
  const std::string text = thrown_by([] { PW_CUDA_CHECK_LAUNCH("scale_kernel"); });
  INFO(text);
  CHECK(text.find("tests/cudasim/check_launch_test.cc:") == 0);
  CHECK(text.find("kernel scale_kernel launch failed") != std::string::npos);
  CHECK(text.find("cudaErrorIllegalAddress") != std::string::npos);
  clean();
}

TEST_CASE("a fault while a kernel runs: under PIPEWRIGHT_CUDA_SYNC=1 thrown at its launch site") {
  clean();
  DeviceFloats x(64), out(1);
  REQUIRE(cudaMemsetAsync(x.p, 0, x.bytes(), nullptr) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);

  // Asynchronous (the default): the launch itself is fine, and the fault shows at the next
  // wait — or already at the launch check, when the stream ran the kernel before it (the
  // fault is sticky as soon as it happened, on a GPU too): then it names the kernel.
  pipewright::cuda::set_synchronous_launches(false);
  PW_LAUNCH(shuffle_kernel, 1, 48, 0, nullptr)(x.p, out.p);
  const std::string at_launch = thrown_by([] { PW_CUDA_CHECK_LAUNCH("shuffle_kernel"); });
  INFO(at_launch);
  if (at_launch.empty()) {
    CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
  } else {
    CHECK(at_launch.find("cudaErrorLaunchFailure") != std::string::npos);
  }
  clean();

  pipewright::cuda::set_synchronous_launches(true);
  CHECK(pipewright::cuda::synchronous_launches());
  PW_LAUNCH(shuffle_kernel, 1, 48, 0, nullptr)(x.p, out.p);
  const std::string text = thrown_by([] { PW_CUDA_CHECK_LAUNCH("shuffle_kernel"); });
  pipewright::cuda::set_synchronous_launches(false);
  INFO(text);
  CHECK(text.find("tests/cudasim/check_launch_test.cc:") == 0);
  CHECK(text.find("kernel shuffle_kernel failed while running (PIPEWRIGHT_CUDA_SYNC=1)") !=
        std::string::npos);
  CHECK(text.find("cudaErrorLaunchFailure") != std::string::npos);
  clean();

  // A good launch under the switch: nothing thrown, and its work is done on return.
  pipewright::cuda::set_synchronous_launches(true);
  DeviceFloats y(1 << 16), z(1 << 16);
  PW_LAUNCH(scale_kernel, 64, 256, 0, nullptr)(y.p, z.p, int64_t{1 << 16}, 2.0f);
  CHECK(thrown_by([] { PW_CUDA_CHECK_LAUNCH("scale_kernel"); }).empty());
  CHECK(cudaStreamQuery(nullptr) == cudaSuccess);
  pipewright::cuda::set_synchronous_launches(false);
  clean();
}

TEST_CASE("PW_CUDA_REPORT prints a failed call on stderr, clears the error and never throws") {
  clean();
  // stderr into a file for the call.
  char path[] = "/tmp/check_launch_test_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  const bool ok = PW_CUDA_REPORT(cudaSetDevice(12345));
  const bool fine = PW_CUDA_REPORT(cudaGetLastError());
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path);
  INFO(text.str());
  CHECK_FALSE(ok);
  CHECK(fine);  // the failure was cleared: the next call sees success
  CHECK(text.str().find("pipewright: tests/cudasim/check_launch_test.cc:") == 0);
  CHECK(text.str().find("cudaSetDevice(12345) failed: ") != std::string::npos);
  CHECK(text.str().find("cudaErrorInvalidDevice") != std::string::npos);
  clean();
}
