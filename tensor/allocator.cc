// Allocator counters and the per-device registry behind allocator_for().
//
// Registry layout (the hot path is one atomic load):
//
//   type ──► slots[0..63]    std::atomic<Allocator*>, filled on first use under the mutex
//        └─► overflow map    Device -> Allocator*, for indices >= 64, always under the mutex
//
// Allocators are created once and never destroyed: tensors held in static storage may outlive
// any destruction order we could choose, and their Storage must still find its allocator.
#include "tensor/allocator.h"

#include <array>
#include <map>
#include <mutex>
#include <stdexcept>

#include "tensor/cpu_allocator.h"

namespace pipewright {

void Allocator::count_alloc(size_t bytes) {
  const int64_t now =
      allocated_.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed) +
      static_cast<int64_t>(bytes);
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void Allocator::count_free(size_t bytes) {
  allocated_.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
}

namespace {

// Every CPU device reads the environment once, when its allocator is created.
Allocator* make_cpu_allocator(Device device) {
  return new CpuAllocator(device, CpuAllocatorOptions::from_environment());
}

constexpr int kFastSlots = 64;

struct TypeRegistry {
  std::array<std::atomic<Allocator*>, kFastSlots> slots{};
  std::map<int, Allocator*> overflow;  // indices >= kFastSlots
  std::atomic<AllocatorFactory> factory{nullptr};
};

struct Registry {
  std::mutex mutex;  // guards creation and `overflow`
  std::array<TypeRegistry, kNumDeviceTypes> types;
  Registry() { types[static_cast<int>(DeviceType::kCPU)].factory = &make_cpu_allocator; }
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed (see the file comment)
  return *r;
}

// Slow path: creates the allocator of `device` (or finds it in the overflow map).
Allocator& create_or_find(Registry& r, Device device) {
  TypeRegistry& t = r.types[static_cast<int>(device.type)];
  std::lock_guard<std::mutex> lock(r.mutex);
  if (device.index < kFastSlots) {
    Allocator* existing = t.slots[device.index].load(std::memory_order_acquire);
    if (existing != nullptr) return *existing;  // another thread won the race
  } else if (auto it = t.overflow.find(device.index); it != t.overflow.end()) {
    return *it->second;
  }
  AllocatorFactory factory = t.factory.load(std::memory_order_acquire);
  if (factory == nullptr) {
    throw std::invalid_argument("allocator_for(" + device.str() + "): " +
                                (device.is_cuda() ? "CUDA is not available (built without "
                                                    "--config=cuda)"
                                                  : "no allocator registered for this device"));
  }
  Allocator* created = factory(device);
  if (device.index < kFastSlots) {
    t.slots[device.index].store(created, std::memory_order_release);
  } else {
    t.overflow.emplace(device.index, created);
  }
  return *created;
}

}  // namespace

Allocator& allocator_for(Device device) {
  if (device.index < 0) {
    throw std::invalid_argument("allocator_for(" + device.str() + "): negative device index");
  }
  Registry& r = registry();
  if (device.index < kFastSlots) {
    Allocator* a = r.types[static_cast<int>(device.type)].slots[device.index].load(
        std::memory_order_acquire);
    if (a != nullptr) return *a;
  }
  return create_or_find(r, device);
}

void register_allocator_factory(DeviceType type, AllocatorFactory factory) {
  registry().types[static_cast<int>(type)].factory.store(factory, std::memory_order_release);
}

}  // namespace pipewright
