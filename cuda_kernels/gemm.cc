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
#include <climits>
#include <cstdint>
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
// 0, C = D. The algorithm is cuBLASLt's heuristic's first choice for the call as it is: the
// workspace it may use and each matrix's real alignment (a micro-batch's rows need not start
// 256 bytes apart, which the heuristic assumes by default), as PyTorch asks. Where cuBLASLt
// declines the call (NOT_SUPPORTED, ARCH_MISMATCH, or no algorithm found), that call takes
// the broadcast path, said once on stderr (bias_epilogue_refusal()); any other status
// throws. A bias not 16-byte aligned and K = 0 (y = the bias) take the broadcast path too.
// Under cudasim the epilogue adds the bias after alpha·AB, as beta·C did, so both paths give
// the same bits; on a card they may run kernels that sum K in other orders (tests/cuda:
// gemm_test compares them within the GEMM's tolerance).
namespace {

std::mutex& refusal_mutex() {
  static std::mutex* m = new std::mutex();
  return *m;
}
std::string& first_refusal() {  // guarded by refusal_mutex()
  static std::string* s = new std::string();
  return *s;
}

/// The largest power of two up to 256 that divides p's address: the alignment cuBLASLt's
/// heuristic is told a matrix has (its default assumes 256, which a row slice of a
/// micro-batch need not have: PyTorch found the same, pytorch#97205).
uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

/// Whether `status` is cuBLASLt declining a call it cannot run (then the broadcast path
/// runs), not an error of the call.
bool refused(cublasStatus_t status) {
  return status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH;
}

/// The cuBLASLt call of gemm_bias; false where cuBLASLt declined it (then c is unchanged).
/// Throws CudaError for any other failure.
bool bias_in_epilogue(GemmTypes mode, cublasHandle_t h, cudaStream_t stream, int device,
                      cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                      const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& c) {
  const void* bias_data = bias.raw_data();
  if (alignment(bias_data) < 16) return false;  // an epilogue reads the bias in 16 bytes
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
  void* workspace = blas_workspace(device, h, stream);
  // Column-major: Lt's A is b ([N, K] as op(b)ᵀ), its B is a, D is cᵀ [N, M] (the Note).
  const int ld_a = std::max(op_a == CUBLAS_OP_T ? m : k, 1);
  const int ld_b = std::max(op_b == CUBLAS_OP_T ? k : n, 1);
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lt_a = nullptr, lt_b = nullptr, lt_d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  cublasStatus_t status = cublasLtMatmulDescCreate(&desc, compute, scale);
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
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
  // The heuristic told what the call has: the workspace, and each matrix's real alignment.
  if (status == CUBLAS_STATUS_SUCCESS) status = cublasLtMatmulPreferenceCreate(&preference);
  const uint64_t workspace_bytes = kBlasWorkspaceBytes;
  const uint32_t aligned[4] = {alignment(b.raw_data()), alignment(a.raw_data()),
                               alignment(c.raw_data()), alignment(c.raw_data())};
  const cublasLtMatmulPreferenceAttributes_t alignment_of[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
        sizeof workspace_bytes);
  }
  for (int i = 0; i < 4 && status == CUBLAS_STATUS_SUCCESS; ++i) {
    status = cublasLtMatmulPreferenceSetAttribute(preference, alignment_of[i], &aligned[i],
                                                  sizeof aligned[i]);
  }
  const auto lt = reinterpret_cast<cublasLtHandle_t>(h);
  cublasLtMatmulHeuristicResult_t choice{};
  int found = 0;
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulAlgoGetHeuristic(lt, desc, lt_a, lt_b, lt_d, lt_d, preference, 1,
                                            &choice, &found);
    if (status == CUBLAS_STATUS_SUCCESS && found == 0) status = CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmul(lt, desc, alpha, b.raw_data(), lt_a, a.raw_data(), lt_b, beta,
                            c.raw_data(), lt_d, c.raw_data(), lt_d, &choice.algo, workspace,
                            kBlasWorkspaceBytes, stream);
  }
  if (preference != nullptr) (void)cublasLtMatmulPreferenceDestroy(preference);
  for (cublasLtMatrixLayout_t l : {lt_a, lt_b, lt_d}) {
    if (l != nullptr) (void)cublasLtMatrixLayoutDestroy(l);
  }
  if (desc != nullptr) (void)cublasLtMatmulDescDestroy(desc);
  if (status == CUBLAS_STATUS_SUCCESS) {
    PW_CUDA_CHECK_LAUNCH("cublasLtMatmul");  // Note [Synchronous launches]
    return true;
  }
  if (!refused(status)) PW_CUDA_CHECK(status);  // throws: an error, not a refusal
  const std::string why = std::string("cuBLASLt declined a GEMM with a bias epilogue (") +
                          dtype_name(a.dtype()) + " operands, " + dtype_name(c.dtype()) +
                          " result, M " + std::to_string(m) + " N " + std::to_string(n) + " K " +
                          std::to_string(k) + ": " + cublasGetStatusName(status) + ", " +
                          cublasGetStatusString(status) + ")";
  std::lock_guard<std::mutex> lock(refusal_mutex());
  if (first_refusal().empty()) {
    first_refusal() = why;
    std::cerr << "pipewright: " << why
              << "; such calls add their bias through a broadcast copy (said once)\n";
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
