// DeviceGraph: see the header and Note [Per-replay scalars].
#include "tensor/graph.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

namespace pipewright {
namespace {

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<Device, DeviceGraph*>& registry() {  // the graph capturing on each device
  static std::map<Device, DeviceGraph*> map;
  return map;
}

int64_t new_pool_id() {
  static std::atomic<int64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

void store_scalar(void* bytes, size_t index, double value, DType dtype) {
  if (dtype == DType::kFloat32) {
    static_cast<float*>(bytes)[index] = static_cast<float>(value);
  } else {
    static_cast<double*>(bytes)[index] = value;
  }
}

DeviceGraph::DeviceGraph(Device device) : DeviceGraph(std::vector<Device>{device}) {}

DeviceGraph::DeviceGraph(std::vector<Device> devices)
    : devices_(std::move(devices)),
      pool_(new_pool_id()),
      stream_(Stream::default_stream(devices_.empty() ? Device::cpu() : devices_.front())) {
  if (devices_.empty()) throw std::invalid_argument("DeviceGraph: no device");
  std::set<Device> distinct;
  for (const Device& d : devices_) {
    if (!distinct.insert(d).second || d.type != devices_.front().type) {
      throw std::invalid_argument("DeviceGraph: " + d.str() + " is repeated or of another "
                                  "type than " + devices_.front().str());
    }
  }
  slots_used_.assign(devices_.size(), 0);
  gates_.resize(devices_.size());
}

DeviceGraph::~DeviceGraph() {
  abandon_capture();
  if (device().is_cuda()) {
    gates_.clear();  // pool blocks: back to their pools, released below
    DeviceBackend& backend = backend_for(device().type);
    backend.destroy_graph(device().index, exec_, pool_);  // waits for the device
    for (size_t k = 1; k < devices_.size(); ++k) {
      backend.destroy_graph(devices_[k].index, nullptr, pool_);  // waits for device k
    }
    member_areas_.clear();  // read by the last replay's nodes there, now done
    backend.free_host(device().index, area_host_);
  }
}

DeviceGraph* DeviceGraph::capturing_on(Device device) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(device);
  return it == registry().end() ? nullptr : it->second;
}

size_t DeviceGraph::index_of(Device device, const char* api) const {
  for (size_t k = 0; k < devices_.size(); ++k) {
    if (devices_[k] == device) return k;
  }
  std::string all;
  for (const Device& d : devices_) all += (all.empty() ? "" : ", ") + d.str();
  throw std::invalid_argument(std::string("DeviceGraph::") + api + ": " + device.str() +
                              " is not one of the graph's devices (" + all + ")");
}

void DeviceGraph::begin_capture(const Stream& stream) {
  const Device home = device();
  if (!home.is_cuda()) {
    throw std::invalid_argument("DeviceGraph::begin_capture: graphs need a CUDA device, got " +
                                home.str());
  }
  if (stream.device() != home || stream.handle() == nullptr) {
    throw std::invalid_argument("DeviceGraph::begin_capture: a graph of " + home.str() +
                                " captures a created stream of that device, got " +
                                (stream.handle() == nullptr ? "the default stream of "
                                                            : "a stream of ") +
                                stream.device().str());
  }
  if (capturing_ || captured()) {
    throw std::logic_error("DeviceGraph::begin_capture: the graph of " + home.str() +
                           " is already " + (capturing_ ? "capturing" : "captured"));
  }
  if (!area_.defined()) make_area(0);  // the slots' areas, before (not in) the capture
  // The forks' streams and events, made before the capture too.
  while (forked_.size() + 1 < devices_.size()) {
    forked_.push_back(Stream::create(devices_[forked_.size() + 1]));
  }
  std::vector<Event> forks;
  for (size_t k = 1; k < devices_.size(); ++k) forks.emplace_back(home);
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    for (const Device& d : devices_) {
      if (registry().count(d) != 0) {
        throw std::logic_error("DeviceGraph::begin_capture: another graph is capturing on " +
                               d.str() + "; one capture at a time per device");
      }
    }
    for (const Device& d : devices_) registry().emplace(d, this);
  }
  DeviceBackend& backend = backend_for(home.type);
  size_t pools = 0;  // the other devices' pools begun
  bool begun = false;
  try {
    for (; pools + 1 < devices_.size(); ++pools) {
      backend.begin_graph_pool(devices_[pools + 1].index, pool_);
    }
    backend.begin_capture(home.index, stream.handle(), pool_);
    begun = true;
    // Note [A graph over devices]: each other device's slots, from home's area to its own,
    // first in the graph; then its stream forks into the capture.
    for (size_t k = 1; k < devices_.size(); ++k) {
      backend.copy(member_areas_[k - 1].raw_data(), devices_[k],
                   static_cast<char*>(area_.raw_data()) + slots_offset_ + k * kSlotBytes, home,
                   kSlotBytes, home.index, stream.handle());
      forks[k - 1].record(stream);
      forks[k - 1].wait(forked_[k - 1]);
    }
  } catch (...) {
    if (begun) {
      try {
        discard_exec(backend.end_capture(home.index, stream.handle()));
      } catch (...) {
      }
    }
    for (size_t k = 1; k <= pools; ++k) backend.end_graph_pool(devices_[k].index);
    unregister();
    throw;
  }
  stream_ = stream;
  capturing_ = true;
}

const Stream& DeviceGraph::stream_of(Device device) const {
  const size_t k = index_of(device, "stream_of");
  if (!capturing_) {
    throw std::logic_error("DeviceGraph::stream_of: the graph of " + this->device().str() +
                           " is not capturing");
  }
  return k == 0 ? stream_ : forked_[k - 1];
}

// Joins the forked streams back into the capture's stream (an error is kept in
// *first_error, unless one is there already).
void DeviceGraph::end_forks(std::exception_ptr* first_error) noexcept {
  for (size_t k = 1; k < devices_.size(); ++k) {
    try {
      Event join(devices_[k]);
      join.record(forked_[k - 1]);
      join.wait(stream_);
    } catch (...) {
      if (*first_error == nullptr) *first_error = std::current_exception();
    }
  }
}

void DeviceGraph::end_capture() {
  if (!capturing_) {
    throw std::logic_error("DeviceGraph::end_capture: the graph of " + device().str() +
                           " is not capturing");
  }
  std::exception_ptr error;
  end_forks(&error);
  capturing_ = false;
  unregister();
  DeviceBackend& backend = backend_for(device().type);
  try {
    exec_ = backend.end_capture(device().index, stream_.handle());
  } catch (...) {
    if (error == nullptr) error = std::current_exception();
  }
  for (size_t k = 1; k < devices_.size(); ++k) backend.end_graph_pool(devices_[k].index);
  if (error != nullptr) {
    discard_exec(exec_);  // the joins failed, the capture did not: discarded all the same
    exec_ = nullptr;
    discard_slots();  // the failed capture's slots are nobody's
    std::rethrow_exception(error);
  }
}

void DeviceGraph::abandon_capture() noexcept {
  if (!capturing_) return;
  try {
    end_capture();
  } catch (...) {
  }
  discard_exec(exec_);  // it ended well after all: still discarded
  exec_ = nullptr;
  discard_slots();
}

void DeviceGraph::unregister() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const Device& d : devices_) registry().erase(d);
}

void DeviceGraph::discard_exec(void* exec) noexcept {
  if (exec != nullptr) backend_for(device().type).destroy_graph(device().index, exec, -1);
}

void DeviceGraph::discard_slots() {
  std::lock_guard<std::mutex> lock(mutex_);
  slots_.clear();
  std::fill(slots_used_.begin(), slots_used_.end(), 0);
}

void* DeviceGraph::scalar_slot(Device device, size_t bytes, Fill fill, Commit commit,
                               bool gated) {
  const size_t k = index_of(device, "scalar_slot");
  if (!capturing_) {
    throw std::logic_error("DeviceGraph::scalar_slot: the graph of " + this->device().str() +
                           " is not capturing");
  }
  const size_t rounded = (bytes + sizeof(double) - 1) / sizeof(double) * sizeof(double);
  std::lock_guard<std::mutex> lock(mutex_);
  size_t& used = slots_used_[k];
  if (rounded == 0 || used + rounded > kSlotBytes) {
    throw std::length_error("DeviceGraph::scalar_slot: " + std::to_string(bytes) +
                            " bytes asked on " + device.str() + " with " + std::to_string(used) +
                            " of " + std::to_string(kSlotBytes) + " used");
  }
  const size_t offset = slots_offset_ + k * kSlotBytes + used;
  void* where = k == 0 ? static_cast<char*>(area_.raw_data()) + offset
                       : static_cast<char*>(member_areas_[k - 1].raw_data()) + used;
  used += rounded;
  slots_.push_back({offset, bytes, std::move(fill), std::move(commit), gated});
  return where;
}

void DeviceGraph::set_gate(const Tensor& gate) {
  if (!capturing_) {
    throw std::logic_error("DeviceGraph::set_gate: the graph of " + device().str() +
                           " is not capturing");
  }
  std::vector<Tensor> gates(devices_.size());  // all or nothing
  if (gate.defined()) {
    const size_t from = index_of(gate.device(), "set_gate");
    for (size_t k = 0; k < devices_.size(); ++k) {
      gates[k] = k == from ? gate : gate.to(devices_[k]);
    }
  }
  gates_.swap(gates);
}

const void* DeviceGraph::gate(Device device) const {
  for (size_t k = 0; k < devices_.size(); ++k) {
    if (devices_[k] == device) return gates_[k].defined() ? gates_[k].raw_data() : nullptr;
  }
  return nullptr;
}

namespace {
constexpr size_t kAlign = 256;  // every staged input and the slots start on this boundary
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
}  // namespace

Tensor DeviceGraph::area_view(size_t offset, const Shape& shape, DType dtype) const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = area_.storage();
  impl->shape = shape;
  impl->strides = shape.contiguous_strides();
  impl->offset = static_cast<int64_t>(offset / element_size(dtype));
  impl->dtype = dtype;
  return Tensor(impl);
}

void DeviceGraph::make_area(size_t input_bytes) {
  slots_offset_ = aligned(input_bytes);
  area_bytes_ = slots_offset_ + devices_.size() * kSlotBytes;
  area_ = (devices_.size() == 1 ? Tensor::empty : Tensor::zeros)(
      {static_cast<int64_t>(area_bytes_ / sizeof(double))},
      {.dtype = DType::kFloat64, .device = device()});
  // Over devices, each other device's area, filled once from home's by a copy outside the
  // capture: peer access between the two is enabled here (Note [Peer copies]), not inside it.
  const Shape section({static_cast<int64_t>(kSlotBytes / sizeof(double))});
  for (size_t k = 1; k < devices_.size(); ++k) {
    member_areas_.push_back(
        Tensor::empty(section, {.dtype = DType::kFloat64, .device = devices_[k]}));
    member_areas_.back().copy_from(
        area_view(slots_offset_ + k * kSlotBytes, section, DType::kFloat64));
  }
  area_host_ = backend_for(device().type).allocate_host(device().index, area_bytes_);
  std::memset(area_host_, 0, area_bytes_);
}

std::vector<Tensor> DeviceGraph::stage_inputs(const std::vector<std::pair<Shape, DType>>& specs) {
  if (!device().is_cuda()) {
    throw std::invalid_argument("DeviceGraph::stage_inputs: graphs need a CUDA device, got " +
                                device().str());
  }
  if (area_.defined() || capturing_ || captured()) {
    throw std::logic_error("DeviceGraph::stage_inputs: call it once, before begin_capture");
  }
  std::vector<size_t> offsets;
  size_t bytes = 0;
  for (const auto& [shape, dtype] : specs) {
    offsets.push_back(bytes);
    bytes = aligned(bytes + static_cast<size_t>(shape.numel()) * element_size(dtype));
  }
  make_area(bytes);
  std::vector<Tensor> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& [shape, dtype] = specs[i];
    staged_.push_back({area_view(offsets[i], shape, dtype), offsets[i]});
    out.push_back(staged_.back().tensor);
  }
  return out;
}

void DeviceGraph::replay(const Stream& stream, const std::vector<Tensor>& sources) {
  if (!captured()) {
    throw std::logic_error("DeviceGraph::replay: the graph of " + device().str() +
                           " has not been captured");
  }
  if (!sources.empty() && sources.size() != staged_.size()) {
    throw std::invalid_argument("DeviceGraph::replay: " + std::to_string(sources.size()) +
                                " sources for " + std::to_string(staged_.size()) +
                                " staged inputs");
  }
  // Note [One host area]
  // Each replay writes its inputs and per-replay scalars into area_host_ and copies it to
  // the device asynchronously (copy_from_host): the host must not write it again before the
  // copy has run. A training loop that reads its loss between replays has waited already;
  // two replays with no host wait between them would let the second one's values into the
  // first one's copy (its batch, its learning rate). So unless the host has waited for the
  // last copy's stream since that copy was issued (host_waits), the next replay waits for it
  // first: one synchronisation, and only then.
  DeviceBackend& backend = backend_for(device().type);
  if (copy_pending_ &&
      backend.host_waits(device().index, copied_on_).finished <= waits_started_at_copy_) {
    backend.synchronize_stream(device().index, copied_on_);
  }
  copy_pending_ = false;
  std::vector<size_t> on_device;  // sources copied by the device itself, after the area
  for (size_t i = 0; i < sources.size(); ++i) {
    const Tensor& source = sources[i];
    const Tensor& staged = staged_[i].tensor;
    if (!source.defined() || source.shape() != staged.shape() ||
        source.dtype() != staged.dtype()) {
      throw std::invalid_argument(
          "DeviceGraph::replay: source " + std::to_string(i) + " is " +
          (source.defined() ? std::string(dtype_name(source.dtype())) + " " + source.shape().str()
                            : std::string("undefined")) +
          ", the staged input " + dtype_name(staged.dtype()) + " " + staged.shape().str());
    }
    if (source.device().is_cpu()) {
      const Tensor host = source.contiguous();
      std::memcpy(static_cast<char*>(area_host_) + staged_[i].offset, host.raw_data(),
                  host.nbytes());
    } else {
      on_device.push_back(i);
    }
  }
  // One copy: from the first staged input when the host sends any (the inputs lie before the
  // slots), else from the slots; up to the last slot.
  const size_t begin = sources.size() > on_device.size() ? 0 : slots_offset_;
  // Over devices, through the last device's used slots: the sections' unused bytes the copy
  // skips stay the zeros make_area wrote, which the graph copies on with the rest of each
  // section (Note [A graph over devices]).
  size_t last = 0;
  for (size_t k = 0; k < slots_used_.size(); ++k) {
    if (slots_used_[k] > 0) last = k;
  }
  const size_t end = slots_offset_ + last * kSlotBytes + slots_used_[last];
  for (const Slot& slot : slots_) {
    if (slot.fill) slot.fill(static_cast<char*>(area_host_) + slot.offset);
  }
  backend.copy_from_host(static_cast<char*>(area_.raw_data()) + begin,
                         static_cast<char*>(area_host_) + begin, end - begin, device().index,
                         stream.handle());
  copied_on_ = stream.handle();
  waits_started_at_copy_ = backend.host_waits(device().index, copied_on_).started;
  copy_pending_ = true;
  for (size_t i : on_device) staged_[i].tensor.copy_from(sources[i]);
  // A launch is ordered after its stream's work only: the other devices' nodes wait for what
  // the caller issued on those devices too (Note [A graph over devices]).
  while (fences_.size() + 1 < devices_.size()) fences_.emplace_back(devices_[fences_.size() + 1]);
  for (size_t k = 1; k < devices_.size(); ++k) {
    fences_[k - 1].record(Stream::current(devices_[k]));
    fences_[k - 1].wait(stream);
  }
  backend.launch_graph(device().index, exec_, stream.handle());
}

void DeviceGraph::commit(bool updated) {
  for (const Slot& slot : slots_) {
    if (slot.commit && (updated || !slot.gated)) slot.commit();
  }
}

int64_t DeviceGraph::pool_bytes() const {
  if (!device().is_cuda()) return 0;
  int64_t bytes = 0;
  for (const Device& d : devices_) {
    bytes += backend_for(d.type).graph_pool_bytes(d.index, pool_);
  }
  return bytes;
}

}  // namespace pipewright
