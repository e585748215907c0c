#include "tensor/check.h"

#include <stdexcept>

namespace pipewright {
namespace {

std::string describe(const Tensor& t) {
  return t.shape().str() + " " + dtype_name(t.dtype()) + " on " + t.device().str();
}

/// How the fix is spelled in C++: "DType::kFloat32", "Device::cpu(2)".
std::string dtype_code(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "DType::kFloat32";
    case DType::kFloat64: return "DType::kFloat64";
    case DType::kInt64: return "DType::kInt64";
    case DType::kBFloat16: return "DType::kBFloat16";
    case DType::kFloat16: return "DType::kFloat16";
  }
  return dtype_name(dtype);
}

std::string device_code(Device device) {
  return std::string("Device::") + device_type_name(device.type) + "(" +
         std::to_string(device.index) + ")";
}

}  // namespace

void check_operand(const std::string& where, const std::string& name, const Tensor& t,
                   DType dtype, Device device, const std::string& other_name,
                   const Tensor& other, const std::string& rule) {
  const bool same_dtype = t.dtype() == dtype, same_device = t.device() == device;
  if (same_dtype && same_device) return;
  std::string fix = name;
  if (!same_dtype) fix += ".to(" + dtype_code(dtype) + ")";
  if (!same_device) fix += ".to(" + device_code(device) + ")";
  const char* differ = same_device ? "dtypes differ"
                       : same_dtype ? "devices differ"
                                    : "dtypes and devices differ";
  throw std::invalid_argument(where + ": the " + name + " (" + describe(t) +
                              ") does not match the " + other_name + " (" + describe(other) +
                              ")" + rule + ": the " + differ + ". Convert the " + name +
                              " first: " + fix);
}

void check_like(const std::string& where, const std::string& name, const Tensor& t,
                const std::string& other_name, const Tensor& other) {
  check_operand(where, name, t, other.dtype(), other.device(), other_name, other);
}

}  // namespace pipewright
