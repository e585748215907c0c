// Streams, events and the device-backend registry.
//
// The CPU backend is built in: CPU work runs synchronously when issued, so every stream and
// event operation is a no-op and a copy is a plain memcpy. A CPU stream handle is a distinct
// heap token (never dereferenced) so that different streams have different handles.
#include "tensor/stream.h"

#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

#include "tensor/deferred_check.h"
#include "tensor/tensor.h"

namespace pipewright {
namespace {

class CpuBackend final : public DeviceBackend {
 public:
  int device_count() override { return 1 << 20; }
  void* create_stream(int) override { return new char; }
  void destroy_stream(int, void* stream) override { delete static_cast<char*>(stream); }
  void synchronize_stream(int, void*) override {}
  void* create_event(int, bool) override { return nullptr; }
  void destroy_event(int, void*) override {}
  void record_event(int, void*, void*) override {}
  void stream_wait_event(int, void*, void*) override {}
  void synchronize_event(int, void*) override {}
  float event_elapsed_ms(int, void*, void*) override { return 0.0f; }
  void copy(void* dst, Device, const void* src, Device, size_t bytes, int, void*) override {
    if (bytes > 0) std::memmove(dst, src, bytes);
  }
};

std::array<std::atomic<DeviceBackend*>, kNumDeviceTypes>& backends() {
  static CpuBackend cpu;  // stateless, so its destruction order does not matter
  static std::array<std::atomic<DeviceBackend*>, kNumDeviceTypes> table{&cpu, nullptr};
  return table;
}

/// The calling thread's current streams; devices without an entry use their default stream.
std::map<Device, Stream>& current_stream_map() {
  thread_local std::map<Device, Stream> map;
  return map;
}

}  // namespace

DeviceBackend& backend_for(DeviceType type) {
  DeviceBackend* backend = backends()[static_cast<int>(type)].load(std::memory_order_acquire);
  if (backend == nullptr) {
    throw std::runtime_error(std::string("no backend for ") + device_type_name(type) +
                             ": built without --config=" + device_type_name(type));
  }
  return *backend;
}

DeviceBackend* register_backend(DeviceType type, DeviceBackend* backend) {
  return backends()[static_cast<int>(type)].exchange(backend, std::memory_order_acq_rel);
}

void DeviceBackend::record_stream(int, void*, int, void*) {}

namespace {
[[noreturn]] void no_graphs(const char* what) {
  throw std::invalid_argument(std::string(what) +
                              ": graphs (stream capture) and their host memory exist for CUDA "
                              "devices only");
}
}  // namespace

void DeviceBackend::begin_capture(int, void*, int64_t) { no_graphs("begin_capture"); }
void DeviceBackend::begin_graph_pool(int, int64_t) { no_graphs("begin_graph_pool"); }
void DeviceBackend::end_graph_pool(int) {}
void* DeviceBackend::end_capture(int, void*) { no_graphs("end_capture"); }
void DeviceBackend::launch_graph(int, void*, void*) { no_graphs("launch_graph"); }
void DeviceBackend::destroy_graph(int, void*, int64_t) {}
int64_t DeviceBackend::graph_pool_bytes(int, int64_t) { return 0; }
void* DeviceBackend::allocate_host(int, size_t) { no_graphs("allocate_host"); }
void DeviceBackend::free_host(int, void*) {}
DeviceBackend::HostWaits DeviceBackend::host_waits(int, void*) { return {}; }

void DeviceBackend::copy_from_host(void*, const void*, size_t, int, void*) {
  no_graphs("copy_from_host");
}

int device_count(DeviceType type) {
  DeviceBackend* backend = backends()[static_cast<int>(type)].load(std::memory_order_acquire);
  return backend == nullptr ? 0 : backend->device_count();
}

// ---- Stream ----

Stream::State::~State() { backend_for(device.type).destroy_stream(device.index, handle); }

Stream Stream::default_stream(Device device) { return Stream(device, nullptr); }

Stream Stream::create(Device device) {
  auto state = std::make_shared<State>();
  state->device = device;
  state->handle = backend_for(device.type).create_stream(device.index);
  return Stream(device, std::move(state));
}

Stream Stream::current(Device device) {
  auto& map = current_stream_map();
  auto it = map.find(device);
  return it == map.end() ? default_stream(device) : it->second;
}

void Stream::synchronize() const {
  backend_for(device_.type).synchronize_stream(device_.index, handle());
  raise_deferred_checks();  // Note [Deferred checks]
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(Stream::current(stream.device())) {
  current_stream_map().insert_or_assign(stream.device(), stream);
}

StreamGuard::~StreamGuard() { current_stream_map().insert_or_assign(previous_.device(), previous_); }

// ---- Event ----

Event::Event(Device device, bool timing)
    : device_(device), handle_(backend_for(device.type).create_event(device.index, timing)) {}

Event::~Event() {
  if (handle_ != nullptr) backend_for(device_.type).destroy_event(device_.index, handle_);
}

Event::Event(Event&& other) noexcept : device_(other.device_), handle_(other.handle_) {
  other.handle_ = nullptr;
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) backend_for(device_.type).destroy_event(device_.index, handle_);
    device_ = other.device_;
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

namespace {
void check_same_device(const char* what, Device event_device, Device stream_device) {
  if (event_device != stream_device) {
    throw std::invalid_argument(std::string("Event::") + what + ": event on " +
                                event_device.str() + " but stream on " + stream_device.str());
  }
}
}  // namespace

void Event::record(const Stream& stream) {
  check_same_device("record", device_, stream.device());
  backend_for(device_.type).record_event(device_.index, handle_, stream.handle());
}

void Event::record() { record(Stream::current(device_)); }

void Event::wait(const Stream& stream) const {
  if (stream.device().type != device_.type) {
    synchronize();  // the other type orders work by the host: the host waits
    return;
  }
  backend_for(device_.type).stream_wait_event(stream.device().index, stream.handle(), handle_);
}

void Event::synchronize() const {
  backend_for(device_.type).synchronize_event(device_.index, handle_);
  raise_deferred_checks();  // Note [Deferred checks]
}

float Event::elapsed_ms(const Event& end) const {
  return backend_for(device_.type).event_elapsed_ms(device_.index, handle_, end.handle_);
}

Device copy_stream_device(Device src, Device dst) {
  return src.type != dst.type && dst.is_cpu() ? src : dst;
}

void copy_on_stream(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t bytes, const Stream& stream) {
  const Device expected = copy_stream_device(src_device, dst_device);
  if (stream.device() != expected) {
    throw std::invalid_argument("copy_on_stream: a copy " + src_device.str() + " -> " +
                                dst_device.str() + " runs on a stream of " + expected.str() +
                                ", got one of " + stream.device().str());
  }
  backend_for(expected.type).copy(dst, dst_device, src, src_device, bytes, expected.index,
                                  stream.handle());
}

void record_stream(const Tensor& tensor, const Stream& stream) {
  if (!tensor.defined()) return;
  const Device device = tensor.device();
  void* base = tensor.storage()->data();  // the allocator's block, not the view's offset
  if (base == nullptr || stream.device().type != device.type) return;
  backend_for(device.type).record_stream(device.index, base, stream.device().index,
                                         stream.handle());
}

}  // namespace pipewright
