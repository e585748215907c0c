// CudaBackend: every DeviceBackend call is one CUDA runtime call on the right device.
//
// Copies are asynchronous on the given stream, with one exception made for safety: a copy to
// the host synchronizes the stream before returning, so the caller may read the bytes at once
// (Tensor::to(Device::cpu()) then item()). For pageable host memory, which is what the CPU
// allocator hands out, the runtime does this anyway. A copy from the host goes through a
// pinned block (Note [Pinned staging], pinned_staging.h), so it is asynchronous too.
//
//   dst \ src   CPU                           CUDA i
//   CPU         (not here: CPU backend)       cudaMemcpyAsync D2H + stream sync
//   CUDA j      memcpy to pinned, H2D async   i == j: cudaMemcpyAsync D2D; else cudaMemcpyPeerAsync
//
// Note [Pooled events]: like streams (Note [Pooled streams]), events are never destroyed:
// destroy_event() puts one back in a per-device pool and create_event() takes from there, so a
// training step that makes and drops its fences every time creates no event once warm. Events
// that only order work are made with cudaEventDisableTiming (cheaper to record); the few made
// for timing are destroyed as usual.
//
// Note [Peer copies]: before the first copy between GPUs i and j, peer access is enabled in
// both directions where cudaDeviceCanAccessPeer allows it (NVLink or PCIe P2P); then a copy
// between them is cudaMemcpyAsync (device to device, by unified addresses), straight from GPU
// to GPU, which a graph capture can hold (as PyTorch copies between GPUs with peer access).
// Where peer access is not possible, cudaMemcpyPeerAsync, which the driver stages through
// host memory and a capture refuses (a step over such GPUs then runs eagerly, said once).
// Either way the copy is asynchronous on the given stream, which may belong to either GPU.
#include "cuda_kernels/backend.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <map>
#include <string>
#include <mutex>
#include <stdexcept>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cuda_kernels/caching_allocator.h"
#include "cuda_kernels/check.h"
#include "cuda_kernels/device_guard.h"
#include "cuda_kernels/pinned_staging.h"
#include "tensor/allocator.h"

namespace pipewright::cuda {
namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }

class CudaBackend final : public DeviceBackend {
 public:
  int device_count() override { return cuda_device_count(); }

  // Note [Pooled streams]: a stream is never cudaStreamDestroy'ed. destroy_stream() puts it
  // back in a per-device pool and create_stream() takes from there first. So a stream handle
  // stays valid for the whole process: the caching allocator may record an event on the
  // stream a tensor was allocated for even after the Stream object that made it is gone (and
  // a destroyed handle can never alias a new stream while old work is pending).
  void* create_stream(int device_index) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& idle = idle_streams_[device_index];
      if (!idle.empty()) {
        cudaStream_t stream = idle.back();
        idle.pop_back();
        return stream;
      }
    }
    DeviceGuard guard(device_index);
    cudaStream_t stream = nullptr;
    // Note [Non-blocking streams]
    PW_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return stream;
  }

  // Called from destructors: never throws.
  void destroy_stream(int device_index, void* stream) override {
    if (stream == nullptr) return;
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      idle_streams_[device_index].push_back(as_stream(stream));
    } catch (...) {
      // Out of memory for the pool's vector: the stream is leaked, which is harmless.
    }
  }

  void synchronize_stream(int device_index, void* stream) override {
    DeviceGuard guard(device_index);
    wait_for(device_index, as_stream(stream));
  }

  HostWaits host_waits(int device_index, void* stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = waits_.find({device_index, as_stream(stream)});
    return it == waits_.end() ? HostWaits{} : it->second;
  }

  void* create_event(int device_index, bool timing) override {
    if (!timing) {  // Note [Pooled events]
      std::lock_guard<std::mutex> lock(mutex_);
      auto& idle = idle_events_[device_index];
      if (!idle.empty()) {
        cudaEvent_t event = idle.back();
        idle.pop_back();
        return event;
      }
    }
    DeviceGuard guard(device_index);
    cudaEvent_t event = nullptr;
    PW_CUDA_CHECK(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
    if (timing) {
      std::lock_guard<std::mutex> lock(mutex_);
      timing_events_.insert(event);
    }
    return event;
  }

  // Called from destructors: never throws.
  void destroy_event(int device_index, void* event) override {
    if (event == nullptr) return;
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      if (timing_events_.erase(as_event(event)) == 0) {
        idle_events_[device_index].push_back(as_event(event));  // Note [Pooled events]
        return;
      }
    } catch (...) {
      // Out of memory for the pool's vector: destroyed below instead.
    }
    PW_CUDA_REPORT(cudaEventDestroy(as_event(event)));
  }

  void record_event(int device_index, void* event, void* stream) override {
    DeviceGuard guard(device_index);
    PW_CUDA_CHECK(cudaEventRecord(as_event(event), as_stream(stream)));
  }

  void stream_wait_event(int device_index, void* stream, void* event) override {
    DeviceGuard guard(device_index);
    PW_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream), as_event(event), 0));
  }

  void synchronize_event(int device_index, void* event) override {
    DeviceGuard guard(device_index);
    PW_CUDA_CHECK(cudaEventSynchronize(as_event(event)));
  }

  float event_elapsed_ms(int device_index, void* start, void* end) override {
    DeviceGuard guard(device_index);
    float ms = 0.0f;
    PW_CUDA_CHECK(cudaEventElapsedTime(&ms, as_event(start), as_event(end)));
    return ms;
  }

  // The copy runs under the stream's device: with a null stream that choice *is* the stream
  // (each GPU's legacy default stream is a different one), so it is the caller's to make,
  // never guessed from the copy's direction (Note [Copies between devices], tensor.cc).
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
            int stream_device_index, void* stream) override {
    if (bytes == 0) return;
    if (dst_device.is_cpu() && src_device.is_cpu()) {
      throw std::invalid_argument("CUDA backend asked to copy " + src_device.str() + " -> " +
                                  dst_device.str() + " (a CPU-to-CPU copy)");
    }
    const Device stream_device = Device::cuda(stream_device_index);
    if (stream_device != dst_device && stream_device != src_device) {
      throw std::invalid_argument("CUDA backend asked to copy " + src_device.str() + " -> " +
                                  dst_device.str() + " on a stream of " + stream_device.str() +
                                  " (a stream of either side expected)");
    }
    DeviceGuard guard(stream_device_index);
    cudaStream_t s = as_stream(stream);
    if (dst_device.is_cuda() && src_device.is_cuda()) {
      if (dst_device.index == src_device.index) {
        PW_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
      } else if (enable_peer_access(dst_device.index, src_device.index)) {  // Note [Peer copies]
        PW_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
      } else {
        PW_CUDA_CHECK(
            cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, s));
      }
    } else if (dst_device.is_cuda()) {
      pinned_staging().copy_to_device(dst, src, bytes, dst_device.index, s);
    } else {
      PW_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
      wait_for(stream_device_index, s);  // the host may read dst on return
    }
  }

  // Forwards to the device's CachingAllocator (Note [Streams that use a block]).
  void record_stream(int device_index, void* ptr, int stream_device_index,
                     void* stream) override {
    auto* allocator = dynamic_cast<CachingAllocator*>(&allocator_for(Device::cuda(device_index)));
    if (allocator != nullptr) allocator->record_stream(ptr, stream_device_index, as_stream(stream));
  }

  // ---- graphs (Note [Graph pools], caching_allocator.h) ----
  void begin_capture(int device_index, void* stream, int64_t pool) override {
    if (stream == nullptr) {
      throw std::invalid_argument("begin_capture: the legacy default stream of cuda:" +
                                  std::to_string(device_index) +
                                  " cannot be captured; capture a created stream");
    }
    CachingAllocator& allocator = caching_allocator(device_index);
    DeviceGuard guard(device_index);
    allocator.begin_graph_pool(pool);
    const cudaError_t status =
        cudaStreamBeginCapture(as_stream(stream), cudaStreamCaptureModeGlobal);
    if (status != cudaSuccess) {
      allocator.end_graph_pool();
      check(status, "cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal)", __FILE__,
            __LINE__);
    }
  }

  void begin_graph_pool(int device_index, int64_t pool) override {
    caching_allocator(device_index).begin_graph_pool(pool);
  }

  void end_graph_pool(int device_index) override {
    caching_allocator(device_index).end_graph_pool();
  }

  void* end_capture(int device_index, void* stream) override {
    CachingAllocator& allocator = caching_allocator(device_index);
    DeviceGuard guard(device_index);
    cudaGraph_t graph = nullptr;
    const cudaError_t status = cudaStreamEndCapture(as_stream(stream), &graph);
    allocator.end_graph_pool();
    check(status, "cudaStreamEndCapture(stream, &graph)", __FILE__, __LINE__);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    PW_CUDA_REPORT(cudaGraphDestroy(graph));  // the executable keeps what it needs
    check(made, "cudaGraphInstantiate(&exec, graph, 0)", __FILE__, __LINE__);
    return exec;
  }

  void launch_graph(int device_index, void* graph, void* stream) override {
    DeviceGuard guard(device_index);
    PW_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), as_stream(stream)));
  }

  void destroy_graph(int device_index, void* graph, int64_t pool) override {
    try {
      DeviceGuard guard(device_index);
      if (graph != nullptr) {
        PW_CUDA_REPORT(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph)));
      }
      caching_allocator(device_index).release_graph_pool(pool);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pipewright: destroying a graph of cuda:%d: %s\n", device_index,
                   e.what());
    }
  }

  int64_t graph_pool_bytes(int device_index, int64_t pool) override {
    return caching_allocator(device_index).graph_pool_bytes(pool);
  }

  void* allocate_host(int device_index, size_t bytes) override {
    DeviceGuard guard(device_index);
    void* ptr = nullptr;
    PW_CUDA_CHECK(cudaMallocHost(&ptr, bytes));
    return ptr;
  }

  void free_host(int device_index, void* ptr) override {
    if (ptr == nullptr) return;
    try {
      DeviceGuard guard(device_index);
      PW_CUDA_REPORT(cudaFreeHost(ptr));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pipewright: freeing host memory of cuda:%d: %s\n", device_index,
                   e.what());
    }
  }

  void copy_from_host(void* dst, const void* src, size_t bytes, int device_index,
                      void* stream) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_index);
    PW_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_stream(stream)));
  }

 private:
  static CachingAllocator& caching_allocator(int device_index) {
    auto* allocator =
        dynamic_cast<CachingAllocator*>(&allocator_for(Device::cuda(device_index)));
    if (allocator == nullptr) {
      throw std::logic_error("cuda:" + std::to_string(device_index) +
                             "'s allocator is not the CachingAllocator; graphs need its pools");
    }
    return *allocator;
  }

  // Note [Peer copies]: once per unordered pair of GPUs, each direction where possible.
  // Whether GPUs a and b reach each other's memory (both directions enabled).
  bool enable_peer_access(int a, int b) {
    const auto pair = std::minmax(a, b);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = peer_pairs_.find(pair);
      if (it != peer_pairs_.end()) return it->second;
    }
    bool both = true;
    for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
      int can = 0;
      PW_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
      if (can == 0) {
        both = false;
        continue;
      }
      DeviceGuard guard(from);
      const cudaError_t status = cudaDeviceEnablePeerAccess(to, 0);
      if (status == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
      } else {
        PW_CUDA_CHECK(status);
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    peer_pairs_[pair] = both;
    return both;
  }

  /// cudaStreamSynchronize(s) (a stream of device `device`), counted in host_waits: the
  /// wait's ticket is taken before it begins, so a finished ticket covers all work queued
  /// before that. Keyed by device too: every device's default stream is the null handle.
  void wait_for(int device, cudaStream_t s) {
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ticket = ++waits_[{device, s}].started;
    }
    PW_CUDA_CHECK(cudaStreamSynchronize(s));
    std::lock_guard<std::mutex> lock(mutex_);
    HostWaits& w = waits_[{device, s}];
    if (ticket > w.finished) w.finished = ticket;
  }

  std::mutex mutex_;
  std::map<std::pair<int, cudaStream_t>, HostWaits> waits_;  // host_waits
  std::map<int, std::vector<cudaStream_t>> idle_streams_;  // Note [Pooled streams]
  std::map<int, std::vector<cudaEvent_t>> idle_events_;    // Note [Pooled events]
  std::unordered_set<cudaEvent_t> timing_events_;          // made with timing: not pooled
  std::map<std::pair<int, int>, bool> peer_pairs_;         // Note [Peer copies]: both ways?
};

}  // namespace

DeviceBackend& cuda_backend() {
  static CudaBackend* backend = new CudaBackend();  // never destroyed: outlives static tensors
  return *backend;
}

int cuda_device_count() {
  static std::once_flag once;
  static int count = 0;
  std::call_once(once, [] {
    int n = 0;
    const cudaError_t status = cudaGetDeviceCount(&n);
    if (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice) {
      (void)cudaGetLastError();
      n = 0;  // no GPU here: a CPU-only machine, or a CI container without the driver
    } else {
      check(status, "cudaGetDeviceCount(&n)", __FILE__, __LINE__);  // throws; retried next call
    }
    count = n;
  });
  return count;
}

}  // namespace pipewright::cuda
