// How float32 matrix products may compute on the GPU: PyTorch's
// torch.set_float32_matmul_precision, process-wide.
#pragma once

#include <string>
#include <string_view>

namespace pipewright {

/// The internal precision of float32 matrix products (GEMMs, batched products, Linear) on CUDA
/// devices; torch.set_float32_matmul_precision's values of the same names.
///   kHighest  full float32 products and sums (cuBLAS's CUBLAS_DEFAULT_MATH): the CPU's
///             results to float32 rounding. The default.
///   kHigh     TensorFloat-32 (CUBLAS_TF32_TENSOR_OP_MATH): operands rounded to 10 mantissa
///             bits, float32 sums, on the tensor cores of Ampere and later (Hopper: several
///             times float32's rate, ~1e-3 relative accuracy). What
///             torch.backends.cuda.matmul.allow_tf32 = True selects.
/// CPU products ignore it (OpenBLAS computes float32 exactly; torch's CPU matmuls ignore
/// "high" too). Products of 16-bit operands (autograd/precision.h) and float64 are unaffected.
/// torch's "medium" (bfloat16 inside float32 products) has no value here: use a bf16
/// Precision policy instead.
enum class Float32MatmulPrecision { kHighest, kHigh };

/// Sets the precision for every thread; takes effect at each thread's next product (a CUDA
/// graph keeps the math of its capture). Thread-safe.
void set_float32_matmul_precision(Float32MatmulPrecision precision);
Float32MatmulPrecision float32_matmul_precision();

/// "highest" or "high" (torch's names).
std::string float32_matmul_precision_name(Float32MatmulPrecision precision);
/// The value named `name` ("highest", "high"). Throws std::invalid_argument naming `name` and
/// the accepted names otherwise ("medium" included, saying what to use instead).
Float32MatmulPrecision float32_matmul_precision_from_name(std::string_view name);

}  // namespace pipewright
