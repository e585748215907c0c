#include "tensor/matmul_precision.h"

#include <atomic>
#include <stdexcept>

namespace pipewright {
namespace {
std::atomic<Float32MatmulPrecision> g_precision{Float32MatmulPrecision::kHighest};
}  // namespace

void set_float32_matmul_precision(Float32MatmulPrecision precision) {
  g_precision.store(precision, std::memory_order_relaxed);
}

Float32MatmulPrecision float32_matmul_precision() {
  return g_precision.load(std::memory_order_relaxed);
}

std::string float32_matmul_precision_name(Float32MatmulPrecision precision) {
  return precision == Float32MatmulPrecision::kHigh ? "high" : "highest";
}

Float32MatmulPrecision float32_matmul_precision_from_name(std::string_view name) {
  if (name == "highest") return Float32MatmulPrecision::kHighest;
  if (name == "high") return Float32MatmulPrecision::kHigh;
  std::string message = "float32 matmul precision '" + std::string(name) +
                        "': expected 'highest' (float32) or 'high' (TF32)";
  if (name == "medium") {
    message += "; 'medium' (bfloat16 inside float32 products) is not offered: use the bf16 "
               "precision policy (autograd::Precision::kBFloat16, --precision bf16)";
  }
  throw std::invalid_argument(message);
}

}  // namespace pipewright
