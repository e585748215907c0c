// Device: where a tensor's memory lives, typed (never parsed from strings internally).
//
// CPU devices are independent *virtual* devices: Device::cpu(0) and Device::cpu(1) share the
// machine's memory but each has its own Allocator (own byte counters) and, in a pipeline, its
// own worker thread. Copying between two CPU devices is a memcpy into the other's allocator.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace pipewright {

enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };
constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static constexpr Device cpu(int index = 0) { return {DeviceType::kCPU, index}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }

  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }

  /// "cpu:1", "cuda:0".
  std::string str() const;

  /// Parses "cpu", "cpu:1", "cuda", "cuda:0". Throws std::invalid_argument naming the text.
  /// (For command lines only; the library itself passes Device values.)
  static Device parse(const std::string& text);

  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
  friend bool operator<(const Device& a, const Device& b) {
    return a.type != b.type ? a.type < b.type : a.index < b.index;
  }
};

const char* device_type_name(DeviceType t);  // "cpu", "cuda"
std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace pipewright

template <>
struct std::hash<pipewright::Device> {
  size_t operator()(const pipewright::Device& d) const noexcept {
    return (static_cast<size_t>(d.type) << 16) ^ static_cast<size_t>(d.index);
  }
};
