// DeviceGraph: see the header and Note [Per-replay scalars].
#include "tensor/graph.h"

#include <atomic>
#include <map>
#include <stdexcept>
#include <string>

namespace pipewright {
namespace {

constexpr size_t kChunkWords = 2048;  // 16 KiB of slots per chunk: one copy per chunk

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

DeviceGraph::DeviceGraph(Device device)
    : device_(device), pool_(new_pool_id()), stream_(Stream::default_stream(device)) {}

DeviceGraph::~DeviceGraph() {
  abandon_capture();
  if (device_.is_cuda()) {
    chunks_.clear();  // back to the pool before it is released
    backend_for(device_.type).destroy_graph(device_.index, exec_, pool_);
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
    chunks_.clear();
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
  chunks_.clear();
}

void* DeviceGraph::scalar_slot(size_t bytes, Fill fill, Commit commit) {
  if (!capturing_) {
    throw std::logic_error("DeviceGraph::scalar_slot: the graph of " + device_.str() +
                           " is not capturing");
  }
  const size_t words = (bytes + sizeof(double) - 1) / sizeof(double);
  if (words == 0 || words > kChunkWords) {
    throw std::invalid_argument("DeviceGraph::scalar_slot: " + std::to_string(bytes) +
                                " bytes (1 to " + std::to_string(kChunkWords * 8) + ")");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (chunks_.empty() || chunks_.back().used + words > kChunkWords) {
    Chunk chunk;
    // Allocated on the capturing thread's current stream, which is in the capture: from the
    // graph's pool, so it lives (at this address) as long as the graph. Not zeroed: a
    // zeroing kernel would be captured, and replayed after the slots' copy.
    chunk.device = Tensor::empty({static_cast<int64_t>(kChunkWords)},
                                 {.dtype = DType::kFloat64, .device = device_});
    chunk.host.assign(kChunkWords, 0.0);
    chunks_.push_back(std::move(chunk));
  }
  Chunk& chunk = chunks_.back();
  const size_t offset = chunk.used;
  chunk.used += words;
  slots_.push_back({chunks_.size() - 1, offset, bytes, std::move(fill), std::move(commit)});
  return chunk.device.data<double>() + offset;
}

void DeviceGraph::replay(const Stream& stream) {
  if (!captured()) {
    throw std::logic_error("DeviceGraph::replay: the graph of " + device_.str() +
                           " has not been captured");
  }
  for (const Slot& slot : slots_) {
    if (slot.fill) slot.fill(chunks_[slot.chunk].host.data() + slot.offset);
  }
  for (const Chunk& chunk : chunks_) {
    copy_on_stream(chunk.device.data<double>(), device_, chunk.host.data(), Device::cpu(),
                   chunk.used * sizeof(double), stream);
  }
  backend_for(device_.type).launch_graph(device_.index, exec_, stream.handle());
}

void DeviceGraph::commit() {
  for (const Slot& slot : slots_) {
    if (slot.commit) slot.commit();
  }
}

int64_t DeviceGraph::pool_bytes() const {
  return device_.is_cuda() ? backend_for(device_.type).graph_pool_bytes(device_.index, pool_) : 0;
}

}  // namespace pipewright
