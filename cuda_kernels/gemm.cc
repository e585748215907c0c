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
// Precision: float32 uses full FP32 math unless set_allow_tf32(true) (blas.h); float64 uses
// cublasDgemm. beta == 0 never reads c (cuBLAS's contract), so NaN in c is ignored.
#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

#include "cuda_kernels/blas.h"
#include "cuda_kernels/check.h"
#include "cuda_kernels/device_guard.h"
#include "cuda_kernels/kernel_table.h"

namespace pipewright::cuda {
namespace {

int checked_int(int64_t v, const char* what) {
  if (v > INT_MAX) {
    throw std::invalid_argument(std::string("cuda gemm: ") + what + " = " + std::to_string(v) +
                                " exceeds cuBLAS's 32-bit limit");
  }
  return static_cast<int>(v);
}

}  // namespace

void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
          double beta, Tensor& c) {
  const int m = checked_int(c.size(0), "M"), n = checked_int(c.size(1), "N");
  const int k = checked_int(trans_a ? a.size(0) : a.size(1), "K");
  if (m == 0 || n == 0) return;
  DeviceGuard guard(c.device());
  cublasHandle_t h = blas_handle(c.device().index, current_stream(c.device()));
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // Leading dimensions must be >= 1 even for an empty K (then c = beta * c).
  const int ld_a = std::max(trans_a ? m : k, 1), ld_b = std::max(trans_b ? k : n, 1);
  switch (c.dtype()) {
    case DType::kFloat32: {
      const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
      PW_CUDA_CHECK(cublasSgemm(h, op_b, op_a, n, m, k, &alpha_f, b.data<float>(), ld_b,
                                a.data<float>(), ld_a, &beta_f, c.data<float>(), n));
      PW_CUDA_CHECK_LAUNCH("cublasSgemm");  // Note [Synchronous launches]
      return;
    }
    case DType::kFloat64:
      PW_CUDA_CHECK(cublasDgemm(h, op_b, op_a, n, m, k, &alpha, b.data<double>(), ld_b,
                                a.data<double>(), ld_a, &beta, c.data<double>(), n));
      PW_CUDA_CHECK_LAUNCH("cublasDgemm");  // Note [Synchronous launches]
      return;
    default:
      throw std::invalid_argument(std::string("cuda gemm: unsupported dtype ") +
                                  dtype_name(c.dtype()) + " (float32 or float64 expected)");
  }
}

// A stack of products, one cuBLAS call: the row-major trick above per product, each operand
// advancing by its matrix size (0 for a stack of one, shared by every product).
void gemm_batched(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
                  double beta, Tensor& c) {
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
  switch (c.dtype()) {
    case DType::kFloat32: {
      const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
      PW_CUDA_CHECK(cublasSgemmStridedBatched(h, op_b, op_a, n, m, k, &alpha_f, b.data<float>(),
                                              ld_b, stride_b, a.data<float>(), ld_a, stride_a,
                                              &beta_f, c.data<float>(), n, stride_c, batch));
      return;
    }
    case DType::kFloat64:
      PW_CUDA_CHECK(cublasDgemmStridedBatched(h, op_b, op_a, n, m, k, &alpha, b.data<double>(),
                                              ld_b, stride_b, a.data<double>(), ld_a, stride_a,
                                              &beta, c.data<double>(), n, stride_c, batch));
      return;
    default:
      throw std::invalid_argument(std::string("cuda gemm_batched: unsupported dtype ") +
                                  dtype_name(c.dtype()) + " (float32 or float64 expected)");
  }
}

}  // namespace pipewright::cuda
