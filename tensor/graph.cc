// DeviceGraph: see the header and Note [Per-replay scalars].
#include "tensor/graph.h"

#include <atomic>
#include <cstring>
#include <map>
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

DeviceGraph::DeviceGraph(Device device)
    : device_(device), pool_(new_pool_id()), stream_(Stream::default_stream(device)) {}

DeviceGraph::~DeviceGraph() {
  abandon_capture();
  if (device_.is_cuda()) {
    DeviceBackend& backend = backend_for(device_.type);
    backend.destroy_graph(device_.index, exec_, pool_);  // waits for the device
    backend.free_host(device_.index, area_host_);
  }
}

DeviceGraph* DeviceGraph::capturing_on(Device device) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(device);
  return it == registry().end() ? nullptr : it->second;
}

void DeviceGraph::begin_capture(const Stream& stream) {
  if (!device_.is_cuda()) {
    throw std::invalid_argument("DeviceGraph::begin_capture: graphs need a CUDA device, got " +
                                device_.str());
  }
  if (stream.device() != device_ || stream.handle() == nullptr) {
    throw std::invalid_argument("DeviceGraph::begin_capture: a graph of " + device_.str() +
                                " captures a created stream of that device, got " +
                                (stream.handle() == nullptr ? "the default stream of "
                                                            : "a stream of ") +
                                stream.device().str());
  }
  if (capturing_ || captured()) {
    throw std::logic_error("DeviceGraph::begin_capture: the graph of " + device_.str() +
                           " is already " + (capturing_ ? "capturing" : "captured"));
  }
  if (!area_.defined()) make_area(0);  // the slots' area, before (not in) the capture
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    if (!registry().emplace(device_, this).second) {
      throw std::logic_error("DeviceGraph::begin_capture: another graph is capturing on " +
                             device_.str() + "; one capture at a time per device");
    }
  }
  try {
    backend_for(device_.type).begin_capture(device_.index, stream.handle(), pool_);
  } catch (...) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().erase(device_);
    throw;
  }
  stream_ = stream;
  capturing_ = true;
}

void DeviceGraph::end_capture() {
  if (!capturing_) {
    throw std::logic_error("DeviceGraph::end_capture: the graph of " + device_.str() +
                           " is not capturing");
  }
  capturing_ = false;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().erase(device_);
  }
  try {
    exec_ = backend_for(device_.type).end_capture(device_.index, stream_.handle());
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    slots_.clear();  // the failed capture's slots are nobody's
    slots_used_ = 0;
    throw;
  }
}

void DeviceGraph::abandon_capture() noexcept {
  if (!capturing_) return;
  try {
    end_capture();
  } catch (...) {
  }
  if (exec_ != nullptr) {  // it ended well after all: still discarded
    backend_for(device_.type).destroy_graph(device_.index, exec_, -1);
    exec_ = nullptr;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  slots_.clear();
  slots_used_ = 0;
}

void* DeviceGraph::scalar_slot(size_t bytes, Fill fill, Commit commit, bool gated) {
  if (!capturing_) {
    throw std::logic_error("DeviceGraph::scalar_slot: the graph of " + device_.str() +
                           " is not capturing");
  }
  const size_t rounded = (bytes + sizeof(double) - 1) / sizeof(double) * sizeof(double);
  std::lock_guard<std::mutex> lock(mutex_);
  if (rounded == 0 || slots_used_ + rounded > kSlotBytes) {
    throw std::length_error("DeviceGraph::scalar_slot: " + std::to_string(bytes) +
                            " bytes asked with " + std::to_string(slots_used_) + " of " +
                            std::to_string(kSlotBytes) + " used");
  }
  const size_t offset = slots_offset_ + slots_used_;
  slots_used_ += rounded;
  slots_.push_back({offset, bytes, std::move(fill), std::move(commit), gated});
  return static_cast<char*>(area_.raw_data()) + offset;
}

namespace {
constexpr size_t kAlign = 256;  // every staged input and the slots start on this boundary
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
}  // namespace

void DeviceGraph::make_area(size_t input_bytes) {
  slots_offset_ = aligned(input_bytes);
  area_bytes_ = slots_offset_ + kSlotBytes;
  area_ = Tensor::empty({static_cast<int64_t>(area_bytes_ / sizeof(double))},
                        {.dtype = DType::kFloat64, .device = device_});
  area_host_ = backend_for(device_.type).allocate_host(device_.index, area_bytes_);
  std::memset(area_host_, 0, area_bytes_);
}

std::vector<Tensor> DeviceGraph::stage_inputs(const std::vector<std::pair<Shape, DType>>& specs) {
  if (!device_.is_cuda()) {
    throw std::invalid_argument("DeviceGraph::stage_inputs: graphs need a CUDA device, got " +
                                device_.str());
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
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = area_.storage();
    impl->shape = shape;
    impl->strides = shape.contiguous_strides();
    impl->offset = static_cast<int64_t>(offsets[i] / element_size(dtype));
    impl->dtype = dtype;
    staged_.push_back({Tensor(impl), offsets[i]});
    out.push_back(staged_.back().tensor);
  }
  return out;
}

void DeviceGraph::replay(const Stream& stream, const std::vector<Tensor>& sources) {
  if (!captured()) {
    throw std::logic_error("DeviceGraph::replay: the graph of " + device_.str() +
                           " has not been captured");
  }
  if (!sources.empty() && sources.size() != staged_.size()) {
    throw std::invalid_argument("DeviceGraph::replay: " + std::to_string(sources.size()) +
                                " sources for " + std::to_string(staged_.size()) +
                                " staged inputs");
  }
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
  const size_t end = slots_offset_ + slots_used_;
  for (const Slot& slot : slots_) {
    if (slot.fill) slot.fill(static_cast<char*>(area_host_) + slot.offset);
  }
  DeviceBackend& backend = backend_for(device_.type);
  backend.copy_from_host(static_cast<char*>(area_.raw_data()) + begin,
                         static_cast<char*>(area_host_) + begin, end - begin, device_.index,
                         stream.handle());
  for (size_t i : on_device) staged_[i].tensor.copy_from(sources[i]);
  backend.launch_graph(device_.index, exec_, stream.handle());
}

void DeviceGraph::commit(bool updated) {
  for (const Slot& slot : slots_) {
    if (slot.commit && (updated || !slot.gated)) slot.commit();
  }
}

int64_t DeviceGraph::pool_bytes() const {
  return device_.is_cuda() ? backend_for(device_.type).graph_pool_bytes(device_.index, pool_) : 0;
}

}  // namespace pipewright
