// DType: the element types pipewright computes with.
//   float32:  activations, parameters, gradients (the default).
//   float64:  gradient checks (finite differences need the precision).
//   int64:    class labels and indices.
//   bfloat16, float16: 16-bit storage (tensor/half.h) for mixed precision: converted with
//             to(DType), copied, viewed, saved and loaded; the kernels that compute take
//             float32 or float64 and name the dtype they got otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <string>

#include "tensor/half.h"

namespace pipewright {

enum class DType : uint8_t { kFloat32, kFloat64, kInt64, kBFloat16, kFloat16 };

/// Bytes per element: 4, 8, 8, 2, 2.
constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kBFloat16:
    case DType::kFloat16: return 2;
    default: return 8;
  }
}

/// "float32", "float64", "int64", "bfloat16", "float16" (PyTorch's names).
const char* dtype_name(DType t);

/// The safetensors spelling: "F32", "F64", "I64", "BF16", "F16".
const char* dtype_safetensors_name(DType t);

/// Inverse of dtype_safetensors_name. Throws std::invalid_argument naming the string.
DType dtype_from_safetensors_name(const std::string& name);

/// Every dtype but int64.
bool is_floating(DType t);
/// bfloat16 and float16.
constexpr bool is_16_bit(DType t) { return t == DType::kBFloat16 || t == DType::kFloat16; }
/// The dtype of a matrix product (matmul, gemm_, attention) of operands of dtype t: float32
/// for 16-bit operands (accumulated in float32), else t.
constexpr DType gemm_result_dtype(DType t) { return is_16_bit(t) ? DType::kFloat32 : t; }

/// The C++ type of a DType, and back.
template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBFloat16; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::kFloat16; };

std::ostream& operator<<(std::ostream& os, DType t);

}  // namespace pipewright
