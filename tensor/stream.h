// Stream and Event: ordering of device work, typed so runtime code has no `if (cuda)`.
//
// CPU work runs synchronously when issued, so a CPU Stream is a no-op queue: synchronize(),
// Event::record() and wait() do nothing and are always complete. CUDA streams wrap
// cudaStream_t and events cudaEvent_t through the DeviceBackend that cuda_kernels/ registers.
//
// Each thread has a *current stream* per device (the device's default stream until a
// StreamGuard changes it); kernels and copies are issued on it. A pipeline worker sets its
// stage's compute stream once; copy streams overlap transfers with compute.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tensor/device.h"

namespace pipewright {

/// What a device type must provide for streams, events and copies. CPU's is built in;
/// cuda_kernels/ registers CUDA's. Handles are opaque (cudaStream_t / cudaEvent_t).
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  /// Number of devices of this type present (CPU: unbounded virtual devices, reports 1 << 20).
  virtual int device_count() = 0;
  virtual void* create_stream(int device_index) = 0;
  virtual void destroy_stream(int device_index, void* stream) = 0;
  virtual void synchronize_stream(int device_index, void* stream) = 0;
  /// An event of device `device_index`; `timing`: it can be asked for elapsed times
  /// (event_elapsed_ms), which costs a timestamp at every record, so events that only order
  /// work are made without.
  virtual void* create_event(int device_index, bool timing) = 0;
  virtual void destroy_event(int device_index, void* event) = 0;
  virtual void record_event(int device_index, void* event, void* stream) = 0;
  /// Makes `stream` (on device `device_index`) wait, on the device and without blocking the
  /// host, for `event`, which may belong to another device of this type (CUDA allows it).
  virtual void stream_wait_event(int device_index, void* stream, void* event) = 0;
  virtual void synchronize_event(int device_index, void* event) = 0;
  /// Milliseconds between two recorded events.
  virtual float event_elapsed_ms(int device_index, void* start, void* end) = 0;
  /// Copies `bytes` from src (on src_device) to dst (on dst_device), asynchronously on
  /// `stream`, a stream of device `stream_device_index` of this backend's type, which must be
  /// one side of the copy (nullptr: that device's default stream; the index is what says
  /// *which* default stream when both sides are of this type).
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t bytes, int stream_device_index, void* stream) = 0;
  /// The allocation `ptr` (the start of a block from this type's allocator on
  /// `device_index`) is used by work on `stream` (on device `stream_device_index`, same
  /// type): its allocator must not reuse it before that work is done. Default: nothing to do
  /// (CPU work is synchronous). See record_stream() below.
  virtual void record_stream(int device_index, void* ptr, int stream_device_index,
                             void* stream);

  // ---- graphs (tensor/graph.h); the defaults throw std::invalid_argument: only CUDA has them
  /// Starts capturing the work issued on `stream` (not a default stream) of device
  /// `device_index`, with its allocations served by graph pool `pool` of the device's
  /// allocator (CUDA: cudaStreamBeginCapture in global mode, Note [Graph pools]).
  virtual void begin_capture(int device_index, void* stream, int64_t pool);
  /// Until end_graph_pool(device_index): allocations on device `device_index`'s streams
  /// that capture come from its allocator's graph pool `pool` (a device whose streams join a
  /// capture begun on another device's stream; begin_capture does this for its own device).
  virtual void begin_graph_pool(int device_index, int64_t pool);
  /// Ends begin_graph_pool's routing. Never throws.
  virtual void end_graph_pool(int device_index);
  /// Ends the capture begun on `stream` and returns the executable graph; throws (the
  /// backend's error: what was refused during the capture) when the capture failed.
  virtual void* end_capture(int device_index, void* stream);
  /// Enqueues the graph `graph` on `stream`.
  virtual void launch_graph(int device_index, void* graph, void* stream);
  /// Destroys an executable graph and releases its pool. Never throws.
  virtual void destroy_graph(int device_index, void* graph, int64_t pool);
  /// Bytes graph pool `pool` of the device's allocator holds.
  virtual int64_t graph_pool_bytes(int device_index, int64_t pool);
  /// Page-locked host memory of `bytes` bytes, from which copy_from_host() copies to device
  /// `device_index` asynchronously (CUDA: cudaMallocHost); released by free_host.
  virtual void* allocate_host(int device_index, size_t bytes);
  /// Releases allocate_host's memory. Never throws.
  virtual void free_host(int device_index, void* ptr);
  /// Copies `bytes` from `src` (memory from allocate_host) to `dst` on device `device_index`,
  /// asynchronously on `stream`: one call, no staging; the host must not rewrite `src` until
  /// the stream has passed the copy (host_waits tells when it has).
  virtual void copy_from_host(void* dst, const void* src, size_t bytes, int device_index,
                              void* stream);

  /// The host's waits for all of `stream`'s work (of device `device_index`): `started` counts
  /// those begun so far (synchronize_stream, a copy to the host on it), `finished` is the
  /// highest count of one that has returned. So work queued on the stream before a read that
  /// gave started = s has finished once a later read gives finished > s. Default {0, 0}: a
  /// backend whose work is done when issued.
  struct HostWaits {
    uint64_t started = 0, finished = 0;
  };
  virtual HostWaits host_waits(int device_index, void* stream);
};

/// The backend of `type`; throws std::runtime_error "no backend for cuda: built without
/// --config=cuda" when none is registered.
DeviceBackend& backend_for(DeviceType type);
/// Installs `backend` for `type` (cuda_kernels/ at start-up; tests may wrap CPU's to record
/// the calls) and returns the one it replaces (nullptr if none).
DeviceBackend* register_backend(DeviceType type, DeviceBackend* backend);
/// Number of devices of `type` (0 when the backend is absent or reports no device).
int device_count(DeviceType type);

class Stream {
 public:
  /// The default stream of `device` (CUDA: the legacy default stream, handle nullptr).
  static Stream default_stream(Device device);
  /// A new stream on `device`, destroyed when the last copy of this handle goes away.
  static Stream create(Device device);
  /// The calling thread's current stream on `device`.
  static Stream current(Device device);

  Device device() const { return device_; }
  void* handle() const { return state_ ? state_->handle : nullptr; }
  /// Blocks the host until all work issued on this stream is done.
  void synchronize() const;

 private:
  struct State {
    Device device;
    void* handle = nullptr;
    ~State();
  };
  Stream(Device device, std::shared_ptr<State> state) : device_(device), state_(std::move(state)) {}
  Device device_;
  std::shared_ptr<State> state_;  // null for a default stream
};

/// Makes `stream` the calling thread's current stream of its device until destroyed.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

class Event {
 public:
  /// `timing`: elapsed_ms() may be asked of it (CUDA: a timestamp at every record); events
  /// that only order work leave it off.
  explicit Event(Device device, bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;

  /// Marks the point in `stream` (default: the current stream) that wait()/synchronize() refer to.
  void record(const Stream& stream);
  void record();
  /// Makes `stream` wait for the recorded point without blocking the host. The stream may be
  /// on another device of the same type (a GPU waiting for a peer's event). A stream of
  /// another device *type* is the host's order: then this blocks the host until the point
  /// is reached (a CPU event is always reached, so a CUDA stream waiting for one is a no-op).
  void wait(const Stream& stream) const;
  /// Blocks the host until the recorded point is reached.
  void synchronize() const;
  /// Milliseconds from this event to `end` (both recorded, both complete, both made with
  /// timing). CPU: 0.
  float elapsed_ms(const Event& end) const;
  Device device() const { return device_; }

 private:
  Device device_;
  void* handle_ = nullptr;
};

/// The device whose streams carry a copy from `src` to `dst`: the destination's, except that
/// a copy from another device type into a CPU device runs on the source's streams (a CPU
/// "stream" is the host itself; a GPU-to-host copy is issued on the GPU, as in PyTorch).
Device copy_stream_device(Device src, Device dst);

/// Copies `bytes` from `src` (on `src_device`) to `dst` (on `dst_device`) on `stream`, through
/// the backend of the stream's device type: asynchronous on a CUDA stream (a copy into host
/// memory still returns only once the bytes are there), a memmove on CPU. Throws
/// std::invalid_argument naming the devices when `stream` is not on
/// copy_stream_device(src_device, dst_device).
void copy_on_stream(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t bytes, const Stream& stream);

class Tensor;

/// PyTorch's Tensor.record_stream: tells the allocator of `tensor`'s storage that `stream`
/// uses it too, so after the tensor is freed its memory is not reused (by any stream) before
/// the work issued on `stream` up to the free is done. Needed when a tensor allocated for one
/// stream is read or written on another (a copy stream, the next stage's compute stream).
/// A no-op for CPU tensors and for a stream of another device type (CPU streams and pageable
/// host copies are synchronous with the host). Undefined or empty tensors are ignored.
void record_stream(const Tensor& tensor, const Stream& stream);

}  // namespace pipewright
