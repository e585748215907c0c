// GEMM through cuBLAS: c = alpha * op(a) * op(b) + beta * c, row-major, no transposed copies;
// and its strided-batched form (gemm_batched: c [B, M, N], a and b stacks of B or 1 matrices).
//
// Shape legend: op(a) [M, K], op(b) [K, N], c [M, N]; a is stored [M, K] (or [K, M] when
// trans_a), b [K, N] (or [N, K] when trans_b); all row-major and contiguous.
//
// Note [Row-major GEMM on a column-major library]
// cuBLAS reads matrices column-major. A row-major [R, C] buffer read column-major is its
// transpose [C, R]. So instead of C = op(A) op(B) we ask cuBLAS for
//     Cᵀ = op(B)ᵀ op(A)ᵀ          ([N, M] = [N, K] · [K, M], column-major)
// whose column-major result *is* row-major C. The operands swap places, keep their transpose
// flags, and each leading dimension is the row length of the buffer as stored:
//     ld(b) = trans_b ? K : N,   ld(a) = trans_a ? M : K,   ld(c) = N.
//
// Precision: float32 uses full FP32 math unless the float32 matmul precision is "high" (TF32;
// tensor/matmul_precision.h, read by blas_handle's math mode); float64 uses
// cublasDgemm. Mixed precision, a and b both bfloat16 or both float16 with c float32, goes to
// cublasGemmEx / cublasGemmStridedBatchedEx with Atype = Btype = CUDA_R_16BF or CUDA_R_16F,
// Ctype CUDA_R_32F, CUBLAS_COMPUTE_32F and float alpha, beta (cuBLAS documentation,
// "cublasGemmEx()", its table of supported type combinations): products and sums in float32,
// as cuBLAS computes PyTorch's 16-bit matmuls, with the float32 result kept rather than
// rounded to 16 bits. Any other mix of dtypes throws std::invalid_argument naming them.
// beta == 0 never reads c (cuBLAS's contract), so NaN in c is ignored.
#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

#include "cuda_kernels/blas.h"
#include "cuda_kernels/check.h"
#include "cuda_kernels/device_guard.h"
#include "cuda_kernels/kernel_table.h"
#include "tensor/dtype.h"

namespace pipewright::cuda {
namespace {

int checked_int(int64_t v, const char* what) {
  if (v > INT_MAX) {
    throw std::invalid_argument(std::string("cuda gemm: ") + what + " = " + std::to_string(v) +
                                " exceeds cuBLAS's 32-bit limit");
  }
  return static_cast<int>(v);
}

// What cuBLAS computes for (a, b, c): one floating dtype throughout, or 16-bit a and b with
// float32 c. Throws std::invalid_argument naming the dtypes for anything else.
enum class GemmTypes { kFloat32, kFloat64, kMixed };

GemmTypes gemm_types(const char* api, const Tensor& a, const Tensor& b, const Tensor& c) {
  const DType t = c.dtype();
  if (a.dtype() == t && b.dtype() == t && (t == DType::kFloat32 || t == DType::kFloat64)) {
    return t == DType::kFloat32 ? GemmTypes::kFloat32 : GemmTypes::kFloat64;
  }
  if (is_16_bit(a.dtype()) && b.dtype() == a.dtype() && t == DType::kFloat32) {
    return GemmTypes::kMixed;
  }
  throw std::invalid_argument(std::string(api) + ": unsupported dtypes a " +
                              dtype_name(a.dtype()) + ", b " + dtype_name(b.dtype()) + ", c " +
                              dtype_name(t) + " (all float32, all float64, or a and b both " +
                              "bfloat16 or both float16 with c float32)");
}

// cublasGemmEx's Atype / Btype for a 16-bit dtype.
cudaDataType half_type(DType t) { return t == DType::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F; }

}  // namespace

void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
          double beta, Tensor& c) {
  const GemmTypes mode = gemm_types("cuda gemm", a, b, c);
  const int m = checked_int(c.size(0), "M"), n = checked_int(c.size(1), "N");
  const int k = checked_int(trans_a ? a.size(0) : a.size(1), "K");
  if (m == 0 || n == 0) return;
  DeviceGuard guard(c.device());
  cublasHandle_t h = blas_handle(c.device().index, current_stream(c.device()));
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // Leading dimensions must be >= 1 even for an empty K (then c = beta * c).
  const int ld_a = std::max(trans_a ? m : k, 1), ld_b = std::max(trans_b ? k : n, 1);
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  switch (mode) {
    case GemmTypes::kFloat32:
      PW_CUDA_CHECK(cublasSgemm(h, op_b, op_a, n, m, k, &alpha_f, b.data<float>(), ld_b,
                                a.data<float>(), ld_a, &beta_f, c.data<float>(), n));
      PW_CUDA_CHECK_LAUNCH("cublasSgemm");  // Note [Synchronous launches]
      return;
    case GemmTypes::kFloat64:
      PW_CUDA_CHECK(cublasDgemm(h, op_b, op_a, n, m, k, &alpha, b.data<double>(), ld_b,
                                a.data<double>(), ld_a, &beta, c.data<double>(), n));
      PW_CUDA_CHECK_LAUNCH("cublasDgemm");  // Note [Synchronous launches]
      return;
    case GemmTypes::kMixed: {
      const cudaDataType t = half_type(a.dtype());
      PW_CUDA_CHECK(cublasGemmEx(h, op_b, op_a, n, m, k, &alpha_f, b.raw_data(), t, ld_b,
                                 a.raw_data(), t, ld_a, &beta_f, c.data<float>(), CUDA_R_32F, n,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      PW_CUDA_CHECK_LAUNCH("cublasGemmEx");  // Note [Synchronous launches]
      return;
    }
  }
}

// A stack of products, one cuBLAS call: the row-major trick above per product, each operand
// advancing by its matrix size (0 for a stack of one, shared by every product).
void gemm_batched(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
                  double beta, Tensor& c) {
  const GemmTypes mode = gemm_types("cuda gemm_batched", a, b, c);
  const int batch = checked_int(c.size(0), "batch");
  const int m = checked_int(c.size(1), "M"), n = checked_int(c.size(2), "N");
  const int k = checked_int(trans_a ? a.size(1) : a.size(2), "K");
  if (batch == 0 || m == 0 || n == 0) return;
  DeviceGuard guard(c.device());
  cublasHandle_t h = blas_handle(c.device().index, current_stream(c.device()));
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ld_a = std::max(trans_a ? m : k, 1), ld_b = std::max(trans_b ? k : n, 1);
  const long long stride_a = a.size(0) == 1 ? 0 : a.size(1) * a.size(2);
  const long long stride_b = b.size(0) == 1 ? 0 : b.size(1) * b.size(2);
  const long long stride_c = static_cast<long long>(m) * n;
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  switch (mode) {
    case GemmTypes::kFloat32:
      PW_CUDA_CHECK(cublasSgemmStridedBatched(h, op_b, op_a, n, m, k, &alpha_f, b.data<float>(),
                                              ld_b, stride_b, a.data<float>(), ld_a, stride_a,
                                              &beta_f, c.data<float>(), n, stride_c, batch));
      PW_CUDA_CHECK_LAUNCH("cublasSgemmStridedBatched");  // Note [Synchronous launches]
      return;
    case GemmTypes::kFloat64:
      PW_CUDA_CHECK(cublasDgemmStridedBatched(h, op_b, op_a, n, m, k, &alpha, b.data<double>(),
                                              ld_b, stride_b, a.data<double>(), ld_a, stride_a,
                                              &beta, c.data<double>(), n, stride_c, batch));
      PW_CUDA_CHECK_LAUNCH("cublasDgemmStridedBatched");  // Note [Synchronous launches]
      return;
    case GemmTypes::kMixed: {
      const cudaDataType t = half_type(a.dtype());
      PW_CUDA_CHECK(cublasGemmStridedBatchedEx(
          h, op_b, op_a, n, m, k, &alpha_f, b.raw_data(), t, ld_b, stride_b, a.raw_data(), t,
          ld_a, stride_a, &beta_f, c.data<float>(), CUDA_R_32F, n, stride_c, batch,
          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      PW_CUDA_CHECK_LAUNCH("cublasGemmStridedBatchedEx");  // Note [Synchronous launches]
      return;
    }
  }
}

}  // namespace pipewright::cuda
