// DType: the element types pipewright computes with.
//   float32: activations, parameters, gradients (the default).
//   float64: gradient checks (finite differences need the precision).
//   int64:   class labels and indices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <string>

namespace pipewright {

enum class DType : uint8_t { kFloat32, kFloat64, kInt64 };

/// Bytes per element: 4, 8, 8.
constexpr size_t element_size(DType t) { return t == DType::kFloat32 ? 4 : 8; }

/// "float32", "float64", "int64" (PyTorch's names).
const char* dtype_name(DType t);

/// The safetensors spelling: "F32", "F64", "I64".
const char* dtype_safetensors_name(DType t);

/// Inverse of dtype_safetensors_name. Throws std::invalid_argument naming the string.
DType dtype_from_safetensors_name(const std::string& name);

bool is_floating(DType t);

/// The C++ type of a DType, and back.
template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };

std::ostream& operator<<(std::ostream& os, DType t);

}  // namespace pipewright
