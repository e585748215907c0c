#include "tensor/dtype.h"

namespace pipewright {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt64: return "int64";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
  }
  return "?";
}

const char* dtype_safetensors_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "F32";
    case DType::kFloat64: return "F64";
    case DType::kInt64: return "I64";
    case DType::kBFloat16: return "BF16";
    case DType::kFloat16: return "F16";
  }
  return "?";
}

DType dtype_from_safetensors_name(const std::string& name) {
  if (name == "F32") return DType::kFloat32;
  if (name == "F64") return DType::kFloat64;
  if (name == "I64") return DType::kInt64;
  if (name == "BF16") return DType::kBFloat16;
  if (name == "F16") return DType::kFloat16;
  throw std::invalid_argument("unsupported safetensors dtype \"" + name +
                              "\" (supported: F32, F64, I64, BF16, F16)");
}

bool is_floating(DType t) { return t != DType::kInt64; }

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

}  // namespace pipewright
