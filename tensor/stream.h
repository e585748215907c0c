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
  virtual void* create_event(int device_index) = 0;
  virtual void destroy_event(int device_index, void* event) = 0;
  virtual void record_event(int device_index, void* event, void* stream) = 0;
  /// Makes `stream` wait (on the device, without blocking the host) for `event`.
  virtual void stream_wait_event(int device_index, void* stream, void* event) = 0;
  virtual void synchronize_event(int device_index, void* event) = 0;
  /// Milliseconds between two recorded events.
  virtual float event_elapsed_ms(int device_index, void* start, void* end) = 0;
  /// Copies `bytes` from src (on src_device) to dst (on dst_device), asynchronously on
  /// `stream` (a stream of whichever side is this backend's device).
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t bytes, void* stream) = 0;
};

/// The backend of `type`; throws std::runtime_error "no backend for cuda: built without
/// --config=cuda" when none is registered.
DeviceBackend& backend_for(DeviceType type);
void register_backend(DeviceType type, DeviceBackend* backend);
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
  explicit Event(Device device);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;

  /// Marks the point in `stream` (default: the current stream) that wait()/synchronize() refer to.
  void record(const Stream& stream);
  void record();
  /// Makes `stream` wait for the recorded point without blocking the host.
  void wait(const Stream& stream) const;
  /// Blocks the host until the recorded point is reached.
  void synchronize() const;
  /// Milliseconds from this event to `end` (both recorded, both complete). CPU: 0.
  float elapsed_ms(const Event& end) const;
  Device device() const { return device_; }

 private:
  Device device_;
  void* handle_ = nullptr;
};

}  // namespace pipewright
