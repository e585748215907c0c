// GEMM through cuBLAS: c = alpha * op(a) * op(b) + beta * c, row-major, no transposed copies;
// its strided-batched form (gemm_batched: c [B, M, N], a and b stacks of B or 1 matrices); and
// c = op(a) * op(b) + bias through cuBLASLt (gemm_bias, Note [The bias in the epilogue]).
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
#include <cublasLt.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <string>

#include "cuda_kernels/blas.h"
#include "cuda_kernels/check.h"
#include "cuda_kernels/device_guard.h"
#include "cuda_kernels/kernel_table.h"
#include "tensor/dtype.h"
#include "tensor/views.h"

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

// Note [The bias in the epilogue]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A Linear with a bias made y by copying the bias into every row of y (a broadcast kernel)
// and then a GEMM with beta = 1 that read y back and wrote it again: three passes over y, one
// launch beside the GEMM. cuBLASLt adds a bias vector in the GEMM's epilogue
// (CUBLASLT_EPILOGUE_BIAS: the vector, as long as D's column-major rows, added to every
// column before D is stored), so y is written once; PyTorch's addmm takes the same path
// (gemm_and_bias). In the row-major trick above D is yᵀ, whose rows are y's columns: the bias
// [N] is exactly that vector. The call names its stream and workspace (blas_workspace: the
// one of this thread's handle on that stream, so work on it stays on one stream) and takes
// the handle cast to a cublasLtHandle_t, which cuBLAS documents as valid. alpha = 1, beta =
// 0, C = D; no algo (cuBLASLt's heuristic picks one). Where cuBLASLt refuses (a status other
// than success: a type or shape it lacks), gemm_bias says so once on stderr and takes the
// broadcast path for that dtype from then on; K = 0 takes it too (y = the bias).
// Under cudasim the epilogue adds the bias after alpha·AB, as beta·C did, so both paths give
// the same bits (tests/cuda:gemm_test); on a card the epilogue's rounding may differ in the
// last bit.
namespace {

std::mutex& refusal_mutex() {
  static std::mutex* m = new std::mutex();
  return *m;
}
std::string& first_refusal() {  // guarded by refusal_mutex()
  static std::string* s = new std::string();
  return *s;
}

/// The cuBLASLt call of gemm_bias; false where cuBLASLt refused (then c is unchanged).
bool bias_in_epilogue(GemmTypes mode, cublasHandle_t h, cudaStream_t stream, int device,
                      cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                      const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& c) {
  static std::atomic<bool> refused[3] = {false, false, false};
  std::atomic<bool>& gave_up = refused[static_cast<int>(mode)];
  if (gave_up.load()) return false;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F, in = CUDA_R_32F, out = CUDA_R_32F;
  if (mode == GemmTypes::kFloat32 && allow_tf32()) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  if (mode == GemmTypes::kFloat64) {
    compute = CUBLAS_COMPUTE_64F;
    scale = in = out = CUDA_R_64F;
  }
  if (mode == GemmTypes::kMixed) in = half_type(a.dtype());
  const double one = 1.0, zero = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const void* alpha = mode == GemmTypes::kFloat64 ? static_cast<const void*>(&one) : &one_f;
  const void* beta = mode == GemmTypes::kFloat64 ? static_cast<const void*>(&zero) : &zero_f;
  // Column-major: Lt's A is b ([N, K] as op(b)ᵀ), its B is a, D is cᵀ [N, M] (the Note).
  const int ld_a = std::max(op_a == CUBLAS_OP_T ? m : k, 1);
  const int ld_b = std::max(op_b == CUBLAS_OP_T ? k : n, 1);
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lt_a = nullptr, lt_b = nullptr, lt_d = nullptr;
  cublasStatus_t status = cublasLtMatmulDescCreate(&desc, compute, scale);
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  const void* bias_data = bias.raw_data();
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* value, size_t bytes) {
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulDescSetAttribute(desc, attr, value, bytes);
    }
  };
  set(CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b);
  set(CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
  set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_data, sizeof bias_data);
  auto layout = [&](cublasLtMatrixLayout_t* l, cudaDataType_t type, int rows, int cols, int ld) {
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatrixLayoutCreate(l, type, static_cast<uint64_t>(rows),
                                          static_cast<uint64_t>(cols), ld);
    }
  };
  layout(&lt_a, in, op_b == CUBLAS_OP_T ? k : n, op_b == CUBLAS_OP_T ? n : k, ld_b);
  layout(&lt_b, in, op_a == CUBLAS_OP_T ? m : k, op_a == CUBLAS_OP_T ? k : m, ld_a);
  layout(&lt_d, out, n, m, n);
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmul(reinterpret_cast<cublasLtHandle_t>(h), desc, alpha, b.raw_data(), lt_a,
                            a.raw_data(), lt_b, beta, c.raw_data(), lt_d, c.raw_data(), lt_d,
                            nullptr, blas_workspace(device, h, stream), kBlasWorkspaceBytes,
                            stream);
  }
  for (cublasLtMatrixLayout_t l : {lt_a, lt_b, lt_d}) {
    if (l != nullptr) (void)cublasLtMatrixLayoutDestroy(l);
  }
  if (desc != nullptr) (void)cublasLtMatmulDescDestroy(desc);
  if (status == CUBLAS_STATUS_SUCCESS) {
    PW_CUDA_CHECK_LAUNCH("cublasLtMatmul");  // Note [Synchronous launches]
    return true;
  }
  if (!gave_up.exchange(true)) {
    const std::string why = std::string("cuBLASLt refused a GEMM with a bias epilogue (") +
                            dtype_name(a.dtype()) + " operands, " + dtype_name(c.dtype()) +
                            " result: " + cublasGetStatusName(status) + ", " +
                            cublasGetStatusString(status) + ")";
    std::cerr << "pipewright: " << why
              << "; such GEMMs add their bias through a broadcast copy from now on\n";
    std::lock_guard<std::mutex> lock(refusal_mutex());
    if (first_refusal().empty()) first_refusal() = why;
  }
  return false;
}

}  // namespace

std::string bias_epilogue_refusal() {
  std::lock_guard<std::mutex> lock(refusal_mutex());
  return first_refusal();
}

void gemm_bias(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, const Tensor& bias,
               Tensor& c) {
  const GemmTypes mode = gemm_types("cuda gemm_bias", a, b, c);
  const int m = checked_int(c.size(0), "M"), n = checked_int(c.size(1), "N");
  const int k = checked_int(trans_a ? a.size(0) : a.size(1), "K");
  if (m == 0 || n == 0) return;
  DeviceGuard guard(c.device());
  const cudaStream_t stream = current_stream(c.device());
  if (k > 0 && bias_epilogue()) {
    cublasHandle_t h = blas_handle(c.device().index, stream);
    if (bias_in_epilogue(mode, h, stream, c.device().index, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                         trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, a, b, bias, c)) {
      return;
    }
  }
  copy_strided(ops::expand(bias, Shape{m, n}), c);  // the broadcast, then C += A·B
  gemm(trans_a, trans_b, 1.0, a, b, 1.0, c);
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
