#include "tensor/device.h"

#include <charconv>
#include <stdexcept>

namespace pipewright {

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::kCPU: return "cpu";
    case DeviceType::kCUDA: return "cuda";
  }
  return "?";
}

std::string Device::str() const {
  return std::string(device_type_name(type)) + ":" + std::to_string(index);
}

namespace {

// "12" -> 12; anything else (empty, sign, trailing text, overflow) -> -1.
int parse_index(const std::string& digits) {
  int value = -1;
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, value);
  if (digits.empty() || digits[0] == '-' || ec != std::errc() || ptr != end) return -1;
  return value;
}

}  // namespace

Device Device::parse(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string type_name = text.substr(0, colon);
  DeviceType type;
  if (type_name == "cpu") {
    type = DeviceType::kCPU;
  } else if (type_name == "cuda") {
    type = DeviceType::kCUDA;
  } else {
    throw std::invalid_argument("Device::parse: unknown device \"" + text +
                                "\" (expected cpu, cpu:N, cuda or cuda:N)");
  }
  if (colon == std::string::npos) return {type, 0};
  const int index = parse_index(text.substr(colon + 1));
  if (index < 0) {
    throw std::invalid_argument("Device::parse: bad device index in \"" + text +
                                "\" (expected a non-negative integer after ':')");
  }
  return {type, index};
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace pipewright
