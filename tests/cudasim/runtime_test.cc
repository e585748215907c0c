// The simulated CUDA runtime: devices, stream order and asynchrony, the legacy barrier,
// events, host functions, errors (sticky or not), copies, use-after-free, peer access.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "tests/cudasim/test_util.h"

using namespace cudasim::testing;

TEST_CASE("devices: count, properties, current device per thread") {
  int n = 0;
  REQUIRE_CUDA(cudaGetDeviceCount(&n));
  REQUIRE(n == 2);
  cudaDeviceProp prop;
  REQUIRE_CUDA(cudaGetDeviceProperties(&prop, 1));
  CHECK(std::string(prop.name) == "cudasim device 1");
  CHECK(prop.major == 9);
  CHECK(prop.minor == 0);
  CHECK(prop.maxThreadsPerBlock == 1024);
  CHECK(prop.maxGridSize[1] == 65535);
  CHECK(prop.sharedMemPerBlock == 48 * 1024);
  CHECK(prop.warpSize == 32);
  CHECK(prop.totalGlobalMem == size_t{4096} << 20);
  CHECK(cudaGetDeviceProperties(&prop, 2) == cudaErrorInvalidDevice);
  int sms = 0;
  REQUIRE_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 1));
  CHECK(sms == prop.multiProcessorCount);
  CHECK(sms == 132);
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 2) ==
        cudaErrorInvalidDevice);
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrEccEnabled, 0) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaSetDevice(5) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaSuccess);  // cleared

  REQUIRE_CUDA(cudaSetDevice(1));
  int other = -1;
  std::thread([&] { (void)cudaGetDevice(&other); }).join();
  CHECK(other == 0);  // per host thread
  int mine = -1;
  REQUIRE_CUDA(cudaGetDevice(&mine));
  CHECK(mine == 1);
  REQUIRE_CUDA(cudaSetDevice(0));
  int version = 0;
  REQUIRE_CUDA(cudaRuntimeGetVersion(&version));
  CHECK(version == CUDART_VERSION);
}

TEST_CASE("stream order and asynchrony: a read before sync sees old data") {
  DeviceFloats buf(4);
  const std::vector<float> ones(4, 1.0f), twos(4, 2.0f);
  REQUIRE_CUDA(cudaMemcpy(buf.p, ones.data(), buf.bytes(), cudaMemcpyHostToDevice));
  cudaStream_t s;
  REQUIRE_CUDA(cudaStreamCreate(&s));
  std::vector<float> host(4, 0.0f);
  REQUIRE_CUDA(cudaLaunchHostFunc(s, sleep_callback, &kLongDelayMs));
  REQUIRE_CUDA(cudaMemcpyAsync(buf.p, twos.data(), buf.bytes(), cudaMemcpyHostToDevice, s));
  REQUIRE_CUDA(cudaMemcpyAsync(host.data(), buf.p, buf.bytes(), cudaMemcpyDeviceToHost, s));
  CHECK(host[0] == 0.0f);  // the stream is still sleeping
  CHECK(cudaStreamQuery(s) == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaSuccess);  // NotReady is a status, not the last error
  REQUIRE_CUDA(cudaStreamSynchronize(s));
  CHECK(host == twos);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  REQUIRE_CUDA(cudaStreamDestroy(s));
  CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle);
  CHECK(cudaStreamDestroy(s) == cudaErrorInvalidResourceHandle);
  CHECK(cudaStreamSynchronize(cudaStreamPerThread) == cudaErrorInvalidResourceHandle);
  CHECK(std::string(cudaGetErrorString(cudaErrorInvalidResourceHandle)).find("not simulated") !=
        std::string::npos);
  clean();
}

TEST_CASE("H2D async reads the pageable source at the call") {
  DeviceFloats buf(1);
  cudaStream_t s;
  REQUIRE_CUDA(cudaStreamCreate(&s));
  REQUIRE_CUDA(cudaLaunchHostFunc(s, sleep_callback, &kLongDelayMs));
  float value = 3.0f;
  REQUIRE_CUDA(cudaMemcpyAsync(buf.p, &value, sizeof value, cudaMemcpyHostToDevice, s));
  value = 4.0f;  // allowed: the source was already read
  float out = 0;
  REQUIRE_CUDA(cudaMemcpyAsync(&out, buf.p, sizeof out, cudaMemcpyDeviceToHost, s));
  REQUIRE_CUDA(cudaStreamSynchronize(s));
  CHECK(out == 3.0f);
  REQUIRE_CUDA(cudaStreamDestroy(s));
}

namespace {
struct Log {
  std::mutex mu;
  std::vector<std::string> entries;
  void add(const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    entries.push_back(e);
  }
};
struct Entry {
  Log* log;
  std::string text;
};
void log_callback(void* p) {
  auto* e = static_cast<Entry*>(p);
  e->log->add(e->text);
}
}  // namespace

TEST_CASE("legacy default stream barrier, both ways; non-blocking streams exempt") {
  Log log;
  Entry slow_blocking{&log, "blocking"}, legacy{&log, "legacy"}, after{&log, "blocking2"},
      nonblocking{&log, "nonblocking"};
  cudaStream_t blocking, free_stream;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&blocking, cudaStreamDefault));
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&free_stream, cudaStreamNonBlocking));
  // legacy waits for the earlier (slow) blocking-stream work
  REQUIRE_CUDA(cudaLaunchHostFunc(blocking, sleep_callback, &kLongDelayMs));
  REQUIRE_CUDA(cudaLaunchHostFunc(blocking, log_callback, &slow_blocking));
  REQUIRE_CUDA(cudaLaunchHostFunc(nullptr, log_callback, &legacy));
  // a blocking stream waits for earlier legacy work; the non-blocking one does not
  REQUIRE_CUDA(cudaLaunchHostFunc(blocking, log_callback, &after));
  REQUIRE_CUDA(cudaLaunchHostFunc(free_stream, log_callback, &nonblocking));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  REQUIRE(log.entries.size() == 4);
  CHECK(log.entries[0] == "nonblocking");
  CHECK(log.entries[1] == "blocking");
  CHECK(log.entries[2] == "legacy");
  CHECK(log.entries[3] == "blocking2");
  REQUIRE_CUDA(cudaStreamDestroy(blocking));
  REQUIRE_CUDA(cudaStreamDestroy(free_stream));
}

TEST_CASE("events: wait across streams and devices, query, synchronize, elapsed time") {
  Log log;
  Entry first{&log, "first"}, second{&log, "second"};
  cudaStream_t a, b;
  cudaEvent_t e, timing_start;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  REQUIRE_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  REQUIRE_CUDA(cudaEventCreate(&timing_start));
  REQUIRE_CUDA(cudaSetDevice(1));
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  REQUIRE_CUDA(cudaSetDevice(0));
  CHECK(cudaEventQuery(e) == cudaSuccess);               // never recorded
  REQUIRE_CUDA(cudaStreamWaitEvent(b, e, 0));            // never recorded: no-op
  REQUIRE_CUDA(cudaEventRecord(timing_start, a));
  REQUIRE_CUDA(cudaLaunchHostFunc(a, sleep_callback, &kLongDelayMs));
  REQUIRE_CUDA(cudaLaunchHostFunc(a, log_callback, &first));
  REQUIRE_CUDA(cudaEventRecord(e, a));
  REQUIRE_CUDA(cudaStreamWaitEvent(b, e, 0));  // device 1 waits for device 0's event
  REQUIRE_CUDA(cudaLaunchHostFunc(b, log_callback, &second));
  CHECK(cudaEventQuery(e) == cudaErrorNotReady);
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  REQUIRE_CUDA(cudaStreamSynchronize(b));
  REQUIRE(log.entries == std::vector<std::string>{"first", "second"});
  CHECK(cudaEventQuery(e) == cudaSuccess);
  REQUIRE_CUDA(cudaEventSynchronize(e));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, timing_start, e) == cudaErrorInvalidResourceHandle);
  cudaEvent_t timing_end;
  REQUIRE_CUDA(cudaEventCreate(&timing_end));
  REQUIRE_CUDA(cudaEventRecord(timing_end, a));
  REQUIRE_CUDA(cudaEventSynchronize(timing_end));
  REQUIRE_CUDA(cudaEventElapsedTime(&ms, timing_start, timing_end));
  CHECK(ms >= kLongDelayMs * 0.9f);
  CHECK(ms < 10000.0f);
  // an event of device 0 cannot be recorded on a device-1 stream
  CHECK(cudaEventRecord(e, b) == cudaErrorInvalidResourceHandle);
  REQUIRE_CUDA(cudaEventDestroy(e));
  CHECK(cudaEventQuery(e) == cudaErrorInvalidResourceHandle);
  CHECK(cudaEventDestroy(e) == cudaErrorInvalidResourceHandle);
  REQUIRE_CUDA(cudaEventDestroy(timing_start));
  REQUIRE_CUDA(cudaEventDestroy(timing_end));
  REQUIRE_CUDA(cudaStreamDestroy(a));
  REQUIRE_CUDA(cudaStreamDestroy(b));
  clean();
}

namespace {
std::atomic<int> g_callback_status{-1};
void call_cuda_from_callback(void*) {
  g_callback_status = static_cast<int>(cudaDeviceSynchronize());
}
}  // namespace

TEST_CASE("host functions run in order; CUDA calls inside them are not permitted") {
  Log log;
  std::vector<Entry> entries;
  for (int i = 0; i < 20; ++i) entries.push_back({&log, std::to_string(i)});
  cudaStream_t s;
  REQUIRE_CUDA(cudaStreamCreate(&s));
  for (auto& e : entries) REQUIRE_CUDA(cudaLaunchHostFunc(s, log_callback, &e));
  REQUIRE_CUDA(cudaLaunchHostFunc(s, call_cuda_from_callback, nullptr));
  REQUIRE_CUDA(cudaStreamSynchronize(s));
  REQUIRE(log.entries.size() == 20);
  for (int i = 0; i < 20; ++i) CHECK(log.entries[static_cast<size_t>(i)] == std::to_string(i));
  CHECK(g_callback_status == static_cast<int>(cudaErrorNotPermitted));
  REQUIRE_CUDA(cudaStreamDestroy(s));
}

TEST_CASE("memcpy kinds are validated against the pointers") {
  DeviceFloats dev(8);
  std::vector<float> host(8, 1.0f);
  CHECK(cudaMemcpy(host.data(), host.data() + 4, 16, cudaMemcpyHostToDevice) ==
        cudaErrorInvalidValue);
  CHECK(std::string(cudaGetErrorString(cudaErrorInvalidValue)).find("destination") !=
        std::string::npos);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(dev.p, host.data(), dev.bytes(), cudaMemcpyDeviceToHost) ==
        cudaErrorInvalidValue);
  CHECK(cudaMemcpy(dev.p, dev.p + 4, 16, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  // out of the allocation
  CHECK(cudaMemcpy(dev.p + 4, host.data(), dev.bytes(), cudaMemcpyHostToDevice) ==
        cudaErrorInvalidValue);
  CHECK(std::string(cudaGetErrorString(cudaErrorInvalidValue)).find("passes the end") !=
        std::string::npos);
  // Default infers; DeviceToDevice of one device works; the error was not sticky
  REQUIRE_CUDA(cudaMemcpy(dev.p, host.data(), dev.bytes(), cudaMemcpyDefault));
  REQUIRE_CUDA(cudaMemcpy(dev.p + 4, dev.p, 16, cudaMemcpyDeviceToDevice));
  std::vector<float> back(8, 0.0f);
  REQUIRE_CUDA(cudaMemcpy(back.data(), dev.p, dev.bytes(), cudaMemcpyDefault));
  CHECK(back == host);
  CHECK(cudaMemsetAsync(host.data(), 0, 4, nullptr) == cudaErrorInvalidValue);
  REQUIRE_CUDA(cudaMemsetAsync(dev.p, 0, dev.bytes(), nullptr));
  REQUIRE_CUDA(cudaMemcpy(back.data(), dev.p, dev.bytes(), cudaMemcpyDeviceToHost));
  CHECK(back == std::vector<float>(8, 0.0f));
  (void)cudaGetLastError();
}

TEST_CASE("cross-device copies (UVA) and cudaMemcpyPeerAsync") {
  DeviceFloats d0(4);
  REQUIRE_CUDA(cudaSetDevice(1));
  DeviceFloats d1(4);
  REQUIRE_CUDA(cudaSetDevice(0));
  const std::vector<float> v{1, 2, 3, 4};
  REQUIRE_CUDA(cudaMemcpy(d0.p, v.data(), d0.bytes(), cudaMemcpyHostToDevice));
  REQUIRE_CUDA(cudaMemcpyPeerAsync(d1.p, 1, d0.p, 0, d0.bytes(), nullptr));
  CHECK(cudaMemcpyPeerAsync(d1.p, 0, d0.p, 0, d0.bytes(), nullptr) == cudaErrorInvalidValue);
  std::vector<float> out(4, 0.0f);
  REQUIRE_CUDA(cudaDeviceSynchronize());  // the peer copy ran on device 0's legacy stream
  REQUIRE_CUDA(cudaMemcpy(out.data(), d1.p, d1.bytes(), cudaMemcpyDeviceToHost));
  CHECK(out == v);
  (void)cudaGetLastError();
}

TEST_CASE("memory limit: allocation failure is not sticky") {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, (size_t{4096} << 20) + 1) == cudaErrorMemoryAllocation);
  CHECK(std::string(cudaGetErrorString(cudaErrorMemoryAllocation)).find("out of memory") == 0);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaSuccess);
  REQUIRE_CUDA(cudaMalloc(&p, 1024));
  CHECK(p != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(p) % 256 == 0);
  void* big = nullptr;
  CHECK(cudaMalloc(&big, size_t{4096} << 20) == cudaErrorMemoryAllocation);  // 1 KiB in use
  REQUIRE_CUDA(cudaFree(p));
  CHECK(cudaFree(p) == cudaErrorInvalidValue);  // double free
  CHECK(std::string(cudaGetErrorString(cudaErrorInvalidValue)).find("already freed") !=
        std::string::npos);
  int local = 0;
  CHECK(cudaFree(&local) == cudaErrorInvalidValue);
  REQUIRE_CUDA(cudaFree(nullptr));
  (void)cudaGetLastError();
}

TEST_CASE("freed memory is poisoned and a kernel using it faults, naming both sites") {
  float* p = nullptr;
  REQUIRE_CUDA(cudaMalloc(reinterpret_cast<void**>(&p), 64));
  REQUIRE_CUDA(cudaFree(p));
  const cudaError_t status =
      fake_kernel(nullptr, "use_after_free_kernel", {{p, cudasim::Access::kToEnd, true, 1}});
  CHECK(status == cudaErrorIllegalAddress);
  const std::string text = cudaGetErrorString(cudaErrorIllegalAddress);
  CHECK(text.find("an illegal memory access was encountered") == 0);
  CHECK(text.find("use_after_free_kernel") != std::string::npos);
  CHECK(text.find("argument 1") != std::string::npos);
  CHECK(text.find("freed memory") != std::string::npos);
  CHECK(text.find("allocated at") != std::string::npos);
  CHECK(text.find("freed at") != std::string::npos);
  // sticky: every later call touching the device fails, cudaGetLastError does not clear it
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  CHECK(cudaDeviceSynchronize() == cudaErrorIllegalAddress);
  void* q = nullptr;
  CHECK(cudaMalloc(&q, 16) == cudaErrorIllegalAddress);
  // the other device is unaffected
  REQUIRE_CUDA(cudaSetDevice(1));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  clean();
  REQUIRE_CUDA(cudaDeviceSynchronize());
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("a kernel's exception makes the device sticky; later work is skipped") {
  DeviceFloats buf(1);
  float value = 5.0f;
  REQUIRE_CUDA(cudaLaunchHostFunc(nullptr, sleep_callback, &kLongDelayMs));  // fault comes later
  REQUIRE_CUDA(fake_kernel(nullptr, "faulting_kernel", {{buf.p, 4, true}},
                           [] { throw cudasim::KernelFault("divergent __syncthreads"); }));
  CHECK(cudaMemcpyAsync(buf.p, &value, 4, cudaMemcpyHostToDevice, nullptr) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
  const std::string text = cudaGetErrorString(cudaErrorLaunchFailure);
  CHECK(text.find("unspecified launch failure") == 0);
  CHECK(text.find("divergent __syncthreads") != std::string::npos);
  CHECK(text.find("faulting_kernel") != std::string::npos);
  CHECK(cudaMemcpyAsync(buf.p, &value, 4, cudaMemcpyHostToDevice, nullptr) ==
        cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  clean();
}

TEST_CASE("kernel pointer rules: host memory and peers without access") {
  int host = 0;
  CHECK(fake_kernel(nullptr, "host_pointer_kernel", {{&host, 4, false, 0}}) ==
        cudaErrorIllegalAddress);
  CHECK(std::string(cudaGetErrorString(cudaErrorIllegalAddress)).find("not device memory") !=
        std::string::npos);
  clean();
  REQUIRE_CUDA(fake_kernel(nullptr, "null_pointer_kernel", {{nullptr, 4, false, 0}}));

  REQUIRE_CUDA(cudaSetDevice(1));
  DeviceFloats on1(4);
  REQUIRE_CUDA(cudaSetDevice(0));
  int can = 0;
  REQUIRE_CUDA(cudaDeviceCanAccessPeer(&can, 0, 1));
  CHECK(can == 1);
  REQUIRE_CUDA(cudaDeviceCanAccessPeer(&can, 0, 0));
  CHECK(can == 0);
  CHECK(fake_kernel(nullptr, "peer_kernel", {{on1.p, cudasim::Access::kToEnd, false, 2}}) ==
        cudaErrorIllegalAddress);
  CHECK(std::string(cudaGetErrorString(cudaErrorIllegalAddress)).find("peer access") !=
        std::string::npos);
  clean();
  CHECK(cudaDeviceEnablePeerAccess(0, 0) == cudaErrorInvalidDevice);  // itself
  REQUIRE_CUDA(cudaDeviceEnablePeerAccess(1, 0));
  CHECK(cudaDeviceEnablePeerAccess(1, 0) == cudaErrorPeerAccessAlreadyEnabled);
  CHECK(cudaGetLastError() == cudaErrorPeerAccessAlreadyEnabled);
  CHECK(cudaGetLastError() == cudaSuccess);  // not sticky
  REQUIRE_CUDA(fake_kernel(nullptr, "peer_kernel", {{on1.p, cudasim::Access::kToEnd, false, 2}}));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  // access is one-way: device 1 has not enabled device 0
  DeviceFloats on0(4);
  REQUIRE_CUDA(cudaSetDevice(1));
  CHECK(fake_kernel(nullptr, "reverse_kernel", {{on0.p, 4, false, 0}}) ==
        cudaErrorIllegalAddress);
  clean();
}

TEST_CASE("error strings and names") {
  CHECK(std::string(cudaGetErrorName(cudaErrorNotReady)) == "cudaErrorNotReady");
  CHECK(std::string(cudaGetErrorString(cudaErrorNotReady)) == "device not ready");
  CHECK(std::string(cudaGetErrorString(cudaErrorNoDevice)) ==
        "no CUDA-capable device is detected");
  CHECK(std::string(cudaGetErrorString(cudaSuccess)) == "no error");
}
