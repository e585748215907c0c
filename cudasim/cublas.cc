// The cuBLAS subset pipewright calls: handles (bound to the device current at cublasCreate,
// on the legacy default stream until cublasSetStream), math mode, workspace, S/D GEMM, S/D
// strided-batched GEMM, and the mixed-precision cublasGemmEx / cublasGemmStridedBatchedEx.
//
// A GEMM is a stream operation like a kernel: its operands are checked (kernel pointer rules)
// and recorded with the race detector — A and B read over exactly their column-major extents,
// C written (and read when beta != 0), and the handle's workspace written. Each handle owns a
// small default workspace (device memory made at cublasCreate), so one handle used on two
// unordered streams shows as a race on its workspace, as it can corrupt results on a GPU.
// The product runs on the stream's thread with Eigen in the operand type (float for the *Ex
// GEMMs below); with CUBLAS_TF32_TENSOR_OP_MATH, Sgemm first rounds A and B to TF32 (10
// mantissa bits, nearest even), as tensor cores do.
//
// Of the *Ex GEMMs' type combinations (cuBLAS documentation, "cublasGemmEx()": the table of
// Atype/Btype/Ctype/computeType it supports) cudasim runs the one pipewright calls: A and B
// both CUDA_R_16BF or both CUDA_R_16F, C CUDA_R_32F, CUBLAS_COMPUTE_32F with float alpha, beta
// (the FAST_16BF / FAST_16F mode naming the operands' own type is the same math, and is
// accepted), CUBLAS_GEMM_DEFAULT. A and B are widened exactly to float and multiplied in
// float. Any other combination returns CUBLAS_STATUS_NOT_SUPPORTED (cuBLAS's status for a
// combination it lacks) with the types in the detail text.
//
// cuBLASLt, the part pipewright calls: cublasLtMatmul with a descriptor (compute and scale
// type, TRANSA / TRANSB, CUBLASLT_EPILOGUE_BIAS with its bias pointer) and four matrix layouts,
// on the stream and workspace the call names, as one GEMM above plus the bias added to every
// column of D. The handle is a cublasHandle_t (cuBLAS documents that any cublasHandle_t may be
// cast to a cublasLtHandle_t; cublasLtCreate makes one). What cudasim runs: the types of the
// GEMMs above (float32 with COMPUTE_32F or COMPUTE_32F_FAST_TF32, float64 with COMPUTE_64F,
// 16-bit A and B with float32 C), host pointer mode, C and D the same matrix; anything else
// is CUBLAS_STATUS_NOT_SUPPORTED naming it. cublasLtMatmulAlgoGetHeuristic returns one
// algorithm that remembers the preference's alignments (default 256 bytes, as cuBLASLt's);
// cublasLtMatmul with it, or with no algo (the default preference), declines
// (NOT_SUPPORTED) a matrix less aligned than that, as cuBLASLt's kernels do, and refuses an
// algo it did not make.
#include <cublasLt.h>
#include <cublas_api.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "cudasim/context.h"
#include "cudasim/errors.h"

using namespace cudasim::detail;  // NOLINT: the C API below is all this file is

namespace {

constexpr size_t kDefaultWorkspaceBytes = 4096;

struct Handle {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  void* default_workspace = nullptr;
};

struct Handles {
  std::mutex mu;
  std::map<uintptr_t, Handle> live;
  uintptr_t next = 0x7000000;
};

Handles& handles() {
  static Handles* h = new Handles();  // leaked like the runtime
  return *h;
}

cublasStatus_t invalid(const std::string& detail) {
  return set_blas_detail(CUBLAS_STATUS_INVALID_VALUE, detail);
}

// Copies the handle's state; NOT_INITIALIZED for an unknown handle.
cublasStatus_t find(cublasHandle_t handle, Handle* out) {
  Handles& h = handles();
  std::lock_guard<std::mutex> lock(h.mu);
  auto it = h.live.find(reinterpret_cast<uintptr_t>(handle));
  if (it == h.live.end()) {
    return set_blas_detail(CUBLAS_STATUS_NOT_INITIALIZED, "not a live cublasHandle_t");
  }
  *out = it->second;
  return CUBLAS_STATUS_SUCCESS;
}

template <typename F>
cublasStatus_t update(cublasHandle_t handle, F change) {
  Handles& h = handles();
  std::lock_guard<std::mutex> lock(h.mu);
  auto it = h.live.find(reinterpret_cast<uintptr_t>(handle));
  if (it == h.live.end()) {
    return set_blas_detail(CUBLAS_STATUS_NOT_INITIALIZED, "not a live cublasHandle_t");
  }
  change(it->second);
  return CUBLAS_STATUS_SUCCESS;
}

float round_tf32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7F800000u) == 0x7F800000u) return x;  // inf, NaN: unchanged
  bits += 0x0FFFu + ((bits >> 13) & 1u);              // round to nearest even at bit 13
  bits &= ~0x1FFFu;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// Bytes a column-major rows x cols operand with leading dimension ld spans (0 if empty).
size_t extent(int rows, int cols, int ld, size_t elem) {
  if (rows == 0 || cols == 0) return 0;
  return (static_cast<size_t>(cols - 1) * static_cast<size_t>(ld) + static_cast<size_t>(rows)) *
         elem;
}

const char* op_name(cublasOperation_t op) {
  return op == CUBLAS_OP_N ? "N" : op == CUBLAS_OP_T ? "T" : "C";
}

float float_from_bits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// Operand element types: how A's and B's elements are stored, and their exact widening to the
// compute type. cudasim keeps its own conversions (it simulates the CUDA libraries and depends
// on nothing of pipewright's).
template <typename T>
struct Plain {  // S/D GEMM: the operands are in the compute type already
  using Storage = T;
  static T widen(T x) { return x; }
};

// bfloat16 is float32's upper 16 bits: widening appends 16 zero bits.
struct BFloat16Bits {
  using Storage = uint16_t;
  static float widen(uint16_t h) { return float_from_bits(static_cast<uint32_t>(h) << 16); }
};

// IEEE 754 binary16 (1 sign, 5 exponent bits of bias 15, 10 mantissa bits): every value, the
// subnormals (mantissa · 2^-24) included, is a float32.
struct Float16Bits {
  using Storage = uint16_t;
  static float widen(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
    if (exponent == 0x1F) return float_from_bits(sign | 0x7F800000u | (mantissa << 13));
    if (exponent != 0) return float_from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
};

template <typename In, typename T>
void compute_product(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, T alpha,
                     const typename In::Storage* A, int lda, const typename In::Storage* B,
                     int ldb, T beta, T* C, int ldc, bool tf32) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  using Stored =
      Eigen::Matrix<typename In::Storage, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  using CMap = Eigen::Map<const Stored, 0, Eigen::OuterStride<>>;
  Eigen::Map<Mat, 0, Eigen::OuterStride<>> c(C, m, n, Eigen::OuterStride<>(ldc));
  if (k == 0) {
    if (beta == T(0)) c.setZero();
    else c *= beta;
    return;
  }
  const bool na = ta == CUBLAS_OP_N, nb = tb == CUBLAS_OP_N;
  CMap a(A, na ? m : k, na ? k : m, Eigen::OuterStride<>(lda));
  CMap b(B, nb ? k : n, nb ? n : k, Eigen::OuterStride<>(ldb));
  const auto widen = [](typename In::Storage x) -> T { return In::widen(x); };
  Mat op_a = na ? Mat(a.unaryExpr(widen)) : Mat(a.transpose().unaryExpr(widen));
  Mat op_b = nb ? Mat(b.unaryExpr(widen)) : Mat(b.transpose().unaryExpr(widen));
  if constexpr (std::is_same_v<T, float>) {
    if (tf32) {
      op_a = op_a.unaryExpr([](float x) { return round_tf32(x); });
      op_b = op_b.unaryExpr([](float x) { return round_tf32(x); });
    }
  }
  Mat product = op_a * op_b;
  if (beta == T(0)) c = alpha * product;  // C is never read: NaN there is ignored
  else c = alpha * product + beta * c;
}

// compute_product, then `bias` (cuBLASLt's CUBLASLT_EPILOGUE_BIAS, or nullptr): m values added
// to every column of the result after alpha·AB + beta·C.
template <typename In, typename T>
void compute(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, T alpha,
             const typename In::Storage* A, int lda, const typename In::Storage* B, int ldb,
             T beta, T* C, int ldc, bool tf32, const T* bias) {
  compute_product<In, T>(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, tf32);
  if (bias == nullptr) return;
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  Eigen::Map<Mat, 0, Eigen::OuterStride<>> c(C, m, n, Eigen::OuterStride<>(ldc));
  c.colwise() += Eigen::Map<const Vec>(bias, m);
}

// One GEMM, or a strided batch of `batch` of them (cublas?gemmStridedBatched: product i reads
// A + i·stride_a and B + i·stride_b and writes C + i·stride_c; a stride of 0 shares one
// operand between every product). A and B hold In::Storage elements, C and the scalars T.
// Where a GEMM runs and with what: a cuBLAS handle's device, stream, math mode and workspace,
// or the ones a cublasLtMatmul call names, and its bias (cuBLASLt's epilogue) if any.
struct Target {
  int device = 0;
  cudaStream_t stream = nullptr;
  bool tf32 = false;  // float32 operands rounded to TF32 first
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  const void* bias = nullptr;  // m values of C's type added to every column
};

template <typename In, typename T>
cublasStatus_t run_gemm(const char* api, const Target& where, cublasOperation_t ta,
                        cublasOperation_t tb, int m, int n, int k, const T* alpha,
                        const typename In::Storage* A, int lda, const typename In::Storage* B,
                        int ldb, const T* beta, T* C, int ldc, long long stride_a = 0,
                        long long stride_b = 0, long long stride_c = 0, int batch = 1);

template <typename In, typename T>
cublasStatus_t gemm(const char* api, cublasHandle_t handle, cublasOperation_t ta,
                    cublasOperation_t tb, int m, int n, int k, const T* alpha,
                    const typename In::Storage* A, int lda, const typename In::Storage* B,
                    int ldb, const T* beta, T* C, int ldc,
                    long long stride_a = 0, long long stride_b = 0, long long stride_c = 0,
                    int batch = 1) {
  Handle h;
  if (cublasStatus_t s = find(handle, &h); s != CUBLAS_STATUS_SUCCESS) return s;
  Target where;
  where.device = h.device;
  where.stream = h.stream;
  where.tf32 = std::is_same_v<In, Plain<float>> && (h.math & 0xF) == CUBLAS_TF32_TENSOR_OP_MATH;
  where.workspace = h.workspace;
  where.workspace_bytes = h.workspace_bytes;
  return run_gemm<In, T>(api, where, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc,
                         stride_a, stride_b, stride_c, batch);
}

template <typename In, typename T>
cublasStatus_t run_gemm(const char* api, const Target& where, cublasOperation_t ta,
                        cublasOperation_t tb, int m, int n, int k, const T* alpha,
                        const typename In::Storage* A, int lda, const typename In::Storage* B,
                        int ldb, const T* beta, T* C, int ldc, long long stride_a,
                        long long stride_b, long long stride_c, int batch) {
  if (in_host_callback()) {
    return set_blas_detail(CUBLAS_STATUS_EXECUTION_FAILED,
                           std::string(api) + " called from a cudaLaunchHostFunc callback");
  }
  auto valid_op = [](cublasOperation_t op) {
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
  };
  std::ostringstream what;
  what << api << " " << (valid_op(ta) ? op_name(ta) : "?") << (valid_op(tb) ? op_name(tb) : "?")
       << " m=" << m << " n=" << n << " k=" << k << " lda=" << lda << " ldb=" << ldb
       << " ldc=" << ldc;
  if (batch != 1) {
    what << " strides " << stride_a << "/" << stride_b << "/" << stride_c << " batch " << batch;
  }
  if (!valid_op(ta) || !valid_op(tb)) return invalid(what.str() + ": invalid operation");
  if (m < 0 || n < 0 || k < 0 || batch < 0) return invalid(what.str() + ": negative size");
  if (stride_a < 0 || stride_b < 0 || stride_c < 0) {
    return invalid(what.str() + ": negative stride");
  }
  const bool na = ta == CUBLAS_OP_N, nb = tb == CUBLAS_OP_N;
  if (lda < std::max(1, na ? m : k)) return invalid(what.str() + ": lda too small");
  if (ldb < std::max(1, nb ? k : n)) return invalid(what.str() + ": ldb too small");
  if (ldc < std::max(1, m)) return invalid(what.str() + ": ldc too small");
  if (alpha == nullptr || beta == nullptr) return invalid(what.str() + ": alpha/beta null");
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const size_t c_bytes = extent(m, n, ldc, sizeof(T));
  if (batch > 1 && static_cast<size_t>(stride_c) * sizeof(T) < c_bytes) {
    return invalid(what.str() + ": stride_c smaller than one C (the products would overlap)");
  }
  const T a_scale = *alpha, b_scale = *beta;  // host pointer mode: read at the call
  const bool tf32 = where.tf32;
  const T* bias = static_cast<const T*>(where.bias);
  Request req;
  req.stream = where.stream;
  req.site.what = what.str();
  req.rules = PointerRules::kKernel;
  // Each operand's extent over the whole batch: the last product's end.
  auto batch_extent = [&](size_t one, long long stride, size_t elem) {
    const size_t step = static_cast<size_t>(stride) * elem;
    return one == 0 ? 0 : one + static_cast<size_t>(batch - 1) * step;
  };
  constexpr size_t kIn = sizeof(typename In::Storage);
  const size_t a_bytes = batch_extent(extent(na ? m : k, na ? k : m, lda, kIn), stride_a, kIn);
  const size_t b_bytes = batch_extent(extent(nb ? k : n, nb ? n : k, ldb, kIn), stride_b, kIn);
  if (a_bytes > 0) req.accesses.push_back({A, a_bytes, false, 0});
  if (b_bytes > 0) req.accesses.push_back({B, b_bytes, false, 1});
  // C: read (beta != 0) and written; the write alone already conflicts with any access.
  req.accesses.push_back({C, batch_extent(c_bytes, stride_c, sizeof(T)), true, 2});
  if (where.workspace != nullptr && where.workspace_bytes > 0) {
    req.accesses.push_back({where.workspace, where.workspace_bytes, true, 3});
  }
  if (bias != nullptr) {
    req.accesses.push_back({bias, static_cast<size_t>(m) * sizeof(T), false, 4});
  }
  req.work = [=] {
    for (int i = 0; i < batch; ++i) {
      compute<In, T>(ta, tb, m, n, k, a_scale, A + i * stride_a, lda, B + i * stride_b, ldb,
                     b_scale, C + i * stride_c, ldc, tf32, bias);
    }
  };
  if (where.stream == nullptr || where.stream == cudaStreamLegacy) {
    // The legacy stream of the device, whatever the caller's current device is.
    const int saved = current_device();
    current_device() = where.device;
    const Enqueued done = enqueue(std::move(req));
    current_device() = saved;
    if (done.status == cudaSuccess) return CUBLAS_STATUS_SUCCESS;
  } else if (enqueue(std::move(req)).status == cudaSuccess) {
    return CUBLAS_STATUS_SUCCESS;
  }
  const cudaError_t error = peek_last_error();
  return set_blas_detail(CUBLAS_STATUS_EXECUTION_FAILED,
                         std::string(error_name(error)) + ": " + error_string(error));
}

// The type arguments of cublasGemmEx / cublasGemmStridedBatchedEx.
struct ExTypes {
  cudaDataType a, b, c;
  cublasComputeType_t compute;
  cublasGemmAlgo_t algo;
};

std::string type_name(cudaDataType t) {
  switch (t) {
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_64F: return "CUDA_R_64F";
    default: return "cudaDataType " + std::to_string(static_cast<int>(t));
  }
}

std::string compute_name(cublasComputeType_t t) {
  switch (t) {
    case CUBLAS_COMPUTE_32F: return "CUBLAS_COMPUTE_32F";
    case CUBLAS_COMPUTE_32F_FAST_16BF: return "CUBLAS_COMPUTE_32F_FAST_16BF";
    case CUBLAS_COMPUTE_32F_FAST_16F: return "CUBLAS_COMPUTE_32F_FAST_16F";
    default: return "cublasComputeType_t " + std::to_string(static_cast<int>(t));
  }
}

// NOT_SUPPORTED, naming the types, unless `t` is a combination cudasim runs (the file's header
// comment). A FAST mode allows down-converting the inputs to its type: for operands already of
// that type it changes nothing.
cublasStatus_t check_ex_types(const char* api, const ExTypes& t) {
  const std::string what = std::string(api) + " A " + type_name(t.a) + " B " + type_name(t.b) +
                           " C " + type_name(t.c) + " compute " + compute_name(t.compute) + ": ";
  auto refuse = [&](const char* why) {
    return set_blas_detail(CUBLAS_STATUS_NOT_SUPPORTED, what + why);
  };
  if ((t.a != CUDA_R_16BF && t.a != CUDA_R_16F) || t.b != t.a || t.c != CUDA_R_32F) {
    return refuse("cudasim runs A and B both CUDA_R_16BF or both CUDA_R_16F with C CUDA_R_32F");
  }
  const cublasComputeType_t own_fast =
      t.a == CUDA_R_16BF ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F_FAST_16F;
  if (t.compute != CUBLAS_COMPUTE_32F && t.compute != own_fast) {
    return refuse("cudasim computes in CUBLAS_COMPUTE_32F only");
  }
  if (t.algo != CUBLAS_GEMM_DEFAULT && t.algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP) {
    return refuse("cudasim runs CUBLAS_GEMM_DEFAULT only");
  }
  return CUBLAS_STATUS_SUCCESS;
}

// A mixed-precision GEMM (or strided batch): the types checked, then gemm() with 16-bit A and
// B and float C, alpha and beta (CUBLAS_COMPUTE_32F's scale type).
cublasStatus_t gemm_ex(const char* api, const ExTypes& t, cublasHandle_t handle,
                       cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       const void* alpha, const void* A, int lda, const void* B, int ldb,
                       const void* beta, void* C, int ldc, long long stride_a = 0,
                       long long stride_b = 0, long long stride_c = 0, int batch = 1) {
  if (cublasStatus_t s = check_ex_types(api, t); s != CUBLAS_STATUS_SUCCESS) return s;
  const auto* a = static_cast<const uint16_t*>(A);
  const auto* b = static_cast<const uint16_t*>(B);
  const auto* alpha_f = static_cast<const float*>(alpha);
  const auto* beta_f = static_cast<const float*>(beta);
  auto* c = static_cast<float*>(C);
  if (t.a == CUDA_R_16BF) {
    return gemm<BFloat16Bits>(api, handle, ta, tb, m, n, k, alpha_f, a, lda, b, ldb, beta_f, c,
                              ldc, stride_a, stride_b, stride_c, batch);
  }
  return gemm<Float16Bits>(api, handle, ta, tb, m, n, k, alpha_f, a, lda, b, ldb, beta_f, c, ldc,
                           stride_a, stride_b, stride_c, batch);
}

}  // namespace

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return invalid("cublasCreate: handle is null");
  Handle h;
  h.device = current_device();
  if (const cudaError_t error =
          device_malloc(h.device, kDefaultWorkspaceBytes, &h.default_workspace);
      error != cudaSuccess) {
    return set_blas_detail(error == cudaErrorMemoryAllocation ? CUBLAS_STATUS_ALLOC_FAILED
                                                              : CUBLAS_STATUS_NOT_INITIALIZED,
                           std::string("cublasCreate: ") + error_string(error));
  }
  h.workspace = h.default_workspace;
  h.workspace_bytes = kDefaultWorkspaceBytes;
  Handles& all = handles();
  std::lock_guard<std::mutex> lock(all.mu);
  all.next += 16;
  all.live[all.next] = h;
  *handle = reinterpret_cast<cublasHandle_t>(all.next);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  void* workspace = nullptr;
  {
    Handles& all = handles();
    std::lock_guard<std::mutex> lock(all.mu);
    auto it = all.live.find(reinterpret_cast<uintptr_t>(handle));
    if (it == all.live.end()) {
      return set_blas_detail(CUBLAS_STATUS_NOT_INITIALIZED, "not a live cublasHandle_t");
    }
    workspace = it->second.default_workspace;
    all.live.erase(it);
  }
  (void)device_free(workspace);  // synchronises the device, as cublasDestroy does
  return CUBLAS_STATUS_SUCCESS;
}

// Like cuBLAS, setting a stream resets the workspace to the handle's default: a workspace set
// before cublasSetStream does not survive it (cublasSetWorkspace must come after).
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  return update(handle, [&](Handle& h) {
    h.stream = stream;
    h.workspace = h.default_workspace;
    h.workspace_bytes = kDefaultWorkspaceBytes;
  });
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (stream == nullptr) return invalid("cublasGetStream: stream is null");
  return update(handle, [&](Handle& h) { *stream = h.stream; });
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  return update(handle, [&](Handle& h) { h.math = mode; });
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (mode == nullptr) return invalid("cublasGetMathMode: mode is null");
  return update(handle, [&](Handle& h) { *mode = h.math; });
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (bytes > 0 && workspace == nullptr) return invalid("cublasSetWorkspace: null workspace");
  return update(handle, [&](Handle& h) {
    h.workspace = bytes > 0 ? workspace : nullptr;
    h.workspace_bytes = bytes;
  });
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc) {
  cudasim::detail::count_api("cublasSgemm");
  return gemm<Plain<float>>("cublasSgemm", handle, transa, transb, m, n, k, alpha, A, lda, B,
                            ldb, beta, C, ldc);
}

cublasStatus_t cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const double* alpha,
                              const double* A, int lda, const double* B, int ldb,
                              const double* beta, double* C, int ldc) {
  cudasim::detail::count_api("cublasDgemm");
  return gemm<Plain<double>>("cublasDgemm", handle, transa, transb, m, n, k, alpha, A, lda, B,
                             ldb, beta, C, ldc);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda,
                                         long long int strideA, const float* B, int ldb,
                                         long long int strideB, const float* beta, float* C,
                                         int ldc, long long int strideC, int batchCount) {
  cudasim::detail::count_api("cublasSgemmStridedBatched");
  return gemm<Plain<float>>("cublasSgemmStridedBatched", handle, transa, transb, m, n, k, alpha,
                            A, lda, B, ldb, beta, C, ldc, strideA, strideB, strideC, batchCount);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const double* alpha, const double* A, int lda,
                                         long long int strideA, const double* B, int ldb,
                                         long long int strideB, const double* beta, double* C,
                                         int ldc, long long int strideC, int batchCount) {
  cudasim::detail::count_api("cublasDgemmStridedBatched");
  return gemm<Plain<double>>("cublasDgemmStridedBatched", handle, transa, transb, m, n, k, alpha,
                             A, lda, B, ldb, beta, C, ldc, strideA, strideB, strideC, batchCount);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  cudasim::detail::count_api("cublasGemmEx");
  const ExTypes types{Atype, Btype, Ctype, computeType, algo};
  return gemm_ex("cublasGemmEx", types, handle, transa, transb, m, n, k, alpha, A, lda, B, ldb,
                 beta, C, ldc);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  cudasim::detail::count_api("cublasGemmStridedBatchedEx");
  const ExTypes types{Atype, Btype, Ctype, computeType, algo};
  return gemm_ex("cublasGemmStridedBatchedEx", types, handle, transa, transb, m, n, k, alpha, A,
                 lda, B, ldb, beta, C, ldc, strideA, strideB, strideC, batchCount);
}

const char* cublasGetStatusString(cublasStatus_t status) { return blas_status_string(status); }
const char* cublasGetStatusName(cublasStatus_t status) { return blas_status_name(status); }

// ---- cuBLASLt ----

namespace {

struct LtDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;  // -1: D's type
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
};
static_assert(sizeof(LtDesc) <= sizeof(cublasLtMatmulDescOpaque_t));

struct LtLayout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
static_assert(sizeof(LtLayout) <= sizeof(cublasLtMatrixLayoutOpaque_t));

// A preference: the workspace the algorithm may use and the alignment of A, B, C, D.
struct LtPreference {
  uint64_t max_workspace = 0;
  uint32_t alignment[4] = {256, 256, 256, 256};
};
static_assert(sizeof(LtPreference) <= sizeof(cublasLtMatmulPreferenceOpaque_t));

// What cudasim's heuristic returns in cublasLtMatmulAlgo_t::data: a mark, then the
// alignments the preference promised.
constexpr uint64_t kCudasimAlgo = 0x63756461'73696d41;  // "cudasimA"

// The live descriptors and layouts: a destroyed or foreign one is refused, not read.
struct LtObjects {
  std::mutex mu;
  std::set<const void*> live;
};

LtObjects& lt_objects() {
  static LtObjects* o = new LtObjects();  // leaked like the runtime
  return *o;
}

template <typename Opaque, typename Value>
cublasStatus_t lt_create(Opaque** out, const Value& value, const char* api) {
  if (out == nullptr) return invalid(std::string(api) + ": the output pointer is null");
  auto* made = new Opaque();
  std::memcpy(made->data, &value, sizeof value);
  LtObjects& o = lt_objects();
  std::lock_guard<std::mutex> lock(o.mu);
  o.live.insert(made);
  *out = made;
  return CUBLAS_STATUS_SUCCESS;
}

template <typename Opaque>
cublasStatus_t lt_destroy(Opaque* object) {
  if (object == nullptr) return CUBLAS_STATUS_SUCCESS;
  LtObjects& o = lt_objects();
  std::lock_guard<std::mutex> lock(o.mu);
  if (o.live.erase(object) == 0) return invalid("not a live cuBLASLt descriptor or layout");
  delete object;
  return CUBLAS_STATUS_SUCCESS;
}

// Reads a live object's value; false for a destroyed or foreign one.
template <typename Value, typename Opaque>
bool lt_read(const Opaque* object, Value* out) {
  LtObjects& o = lt_objects();
  std::lock_guard<std::mutex> lock(o.mu);
  if (o.live.count(object) == 0) return false;
  std::memcpy(out, object->data, sizeof *out);
  return true;
}

// The body of the SetAttribute calls: `field_of(value)` names the field of the live object's
// value that `attr` sets ({nullptr, 0}: one cudasim does not keep); buf must be its size.
template <typename Value, typename Opaque, typename FieldOf>
cublasStatus_t lt_set(const char* api, Opaque* object, int attr, const void* buf, size_t size,
                      FieldOf field_of) {
  Value value;
  if (!lt_read(object, &value)) return invalid(std::string(api) + ": not a live object");
  if (buf == nullptr) return invalid(std::string(api) + ": buf is null");
  const std::pair<void*, size_t> field = field_of(value);
  if (field.first == nullptr) {
    return set_blas_detail(CUBLAS_STATUS_NOT_SUPPORTED, std::string(api) +
                                                            ": cudasim does not keep attribute " +
                                                            std::to_string(attr));
  }
  if (size != field.second) {
    return invalid(std::string(api) + ": attribute " + std::to_string(attr) + " takes " +
                   std::to_string(field.second) + " bytes, got " + std::to_string(size));
  }
  std::memcpy(field.first, buf, size);
  LtObjects& o = lt_objects();
  std::lock_guard<std::mutex> lock(o.mu);
  if (o.live.count(object) == 0) return invalid(std::string(api) + ": destroyed");
  std::memcpy(object->data, &value, sizeof value);
  return CUBLAS_STATUS_SUCCESS;
}

// {&field, sizeof field}, for lt_set.
template <typename T>
std::pair<void*, size_t> field(T& f) {
  return {&f, sizeof f};
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return invalid("cublasLtCreate: handle is null");
  cublasHandle_t h = nullptr;
  const cublasStatus_t s = cublasCreate_v2(&h);
  if (s == CUBLAS_STATUS_SUCCESS) *handle = reinterpret_cast<cublasLtHandle_t>(h);
  return s;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  return cublasDestroy_v2(reinterpret_cast<cublasHandle_t>(handle));
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  LtDesc d;
  d.compute = compute;
  d.scale = scale;
  return lt_create(desc, d, "cublasLtMatmulDescCreate");
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) { return lt_destroy(desc); }

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  return lt_set<LtDesc>("cublasLtMatmulDescSetAttribute", desc, attr, buf, size,
                        [attr](LtDesc& d) -> std::pair<void*, size_t> {
                          switch (attr) {
                            case CUBLASLT_MATMUL_DESC_TRANSA: return field(d.trans_a);
                            case CUBLASLT_MATMUL_DESC_TRANSB: return field(d.trans_b);
                            case CUBLASLT_MATMUL_DESC_EPILOGUE: return field(d.epilogue);
                            case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return field(d.bias);
                            case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return field(d.bias_type);
                            case CUBLASLT_MATMUL_DESC_POINTER_MODE: return field(d.pointer_mode);
                            default: return {nullptr, 0};
                          }
                        });
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  return lt_create(layout, LtLayout{type, rows, cols, ld}, "cublasLtMatrixLayoutCreate");
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return lt_destroy(layout);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  return lt_create(preference, LtPreference{}, "cublasLtMatmulPreferenceCreate");
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  return lt_destroy(preference);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  return lt_set<LtPreference>(
      "cublasLtMatmulPreferenceSetAttribute", preference, attr, buf, size,
      [attr](LtPreference& p) -> std::pair<void*, size_t> {
        switch (attr) {
          case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return field(p.max_workspace);
          case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return field(p.alignment[0]);
          case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return field(p.alignment[1]);
          case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return field(p.alignment[2]);
          case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return field(p.alignment[3]);
          default: return {nullptr, 0};
        }
      });
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t light, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_layout,
    cublasLtMatrixLayout_t b_layout, cublasLtMatrixLayout_t c_layout,
    cublasLtMatrixLayout_t d_layout, cublasLtMatmulPreference_t preference, int requested,
    cublasLtMatmulHeuristicResult_t results[], int* returned) {
  Handle h;
  if (cublasStatus_t s = find(reinterpret_cast<cublasHandle_t>(light), &h);
      s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  LtDesc d;
  LtLayout l;
  LtPreference p;
  if (!lt_read(desc, &d) || !lt_read(a_layout, &l) || !lt_read(b_layout, &l) ||
      !lt_read(c_layout, &l) || !lt_read(d_layout, &l) || !lt_read(preference, &p)) {
    return invalid("cublasLtMatmulAlgoGetHeuristic: a descriptor, layout or preference is "
                   "not live");
  }
  if (requested <= 0 || results == nullptr || returned == nullptr) {
    return invalid("cublasLtMatmulAlgoGetHeuristic: requestedAlgoCount must be >= 1 with "
                   "results and returnAlgoCount given");
  }
  cublasLtMatmulHeuristicResult_t r{};
  r.algo.data[0] = kCudasimAlgo;
  for (int i = 0; i < 4; ++i) r.algo.data[1 + i] = p.alignment[i];
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  results[0] = r;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t light, cublasLtMatmulDesc_t desc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t a_layout,
                              const void* B, cublasLtMatrixLayout_t b_layout, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c_layout, void* D,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  cudasim::detail::count_api("cublasLtMatmul");
  const char* api = "cublasLtMatmul";
  Handle h;
  if (cublasStatus_t s = find(reinterpret_cast<cublasHandle_t>(light), &h);
      s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  LtDesc d;
  LtLayout a, b, c, o;
  if (!lt_read(desc, &d)) return invalid("cublasLtMatmul: not a live descriptor");
  if (!lt_read(a_layout, &a) || !lt_read(b_layout, &b) || !lt_read(c_layout, &c) ||
      !lt_read(d_layout, &o)) {
    return invalid("cublasLtMatmul: a matrix layout is not live");
  }
  const std::string what = std::string(api) + " A " + type_name(a.type) + " B " +
                           type_name(b.type) + " C " + type_name(c.type) + " D " +
                           type_name(o.type) + ": ";
  auto refuse = [&](const std::string& why) {
    return set_blas_detail(CUBLAS_STATUS_NOT_SUPPORTED, what + why);
  };
  uint64_t promised[4] = {256, 256, 256, 256};  // no algo: the default preference's
  if (algo != nullptr) {
    if (algo->data[0] != kCudasimAlgo) {
      return invalid(what + "an algo that cublasLtMatmulAlgoGetHeuristic did not return");
    }
    for (int i = 0; i < 4; ++i) promised[i] = algo->data[1 + i];
  }
  const void* matrices[4] = {A, B, C, D};
  for (int i = 0; i < 4; ++i) {
    if (promised[i] != 0 && reinterpret_cast<uintptr_t>(matrices[i]) % promised[i] != 0) {
      return refuse(std::string("matrix ") + "ABCD"[i] + " is less aligned than the " +
                    std::to_string(promised[i]) + " bytes its algorithm was chosen for");
    }
  }
  if (d.pointer_mode != CUBLASLT_POINTER_MODE_HOST) return refuse("host pointer mode only");
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && d.epilogue != CUBLASLT_EPILOGUE_BIAS) {
    return refuse("epilogue " + std::to_string(d.epilogue) + " (DEFAULT and BIAS only)");
  }
  if (C != D || c.type != o.type || c.rows != o.rows || c.cols != o.cols || c.ld != o.ld) {
    return refuse("cudasim runs C and D as one matrix (the same pointer and layout)");
  }
  if (d.epilogue == CUBLASLT_EPILOGUE_BIAS) {
    if (d.bias == nullptr) return invalid(what + "CUBLASLT_EPILOGUE_BIAS without a bias pointer");
    if (d.bias_type != -1 && d.bias_type != static_cast<int32_t>(o.type)) {
      return refuse("a bias of another type than D's");
    }
  }
  const auto ta = static_cast<cublasOperation_t>(d.trans_a);
  const auto tb = static_cast<cublasOperation_t>(d.trans_b);
  const bool na = ta == CUBLAS_OP_N, nb = tb == CUBLAS_OP_N;
  const uint64_t m = na ? a.rows : a.cols, k = na ? a.cols : a.rows;
  const uint64_t kb = nb ? b.rows : b.cols, n = nb ? b.cols : b.rows;
  if (k != kb || o.rows != m || o.cols != n) {
    return invalid(what + "op(A) " + std::to_string(m) + "x" + std::to_string(k) + ", op(B) " +
                   std::to_string(kb) + "x" + std::to_string(n) + ", D " +
                   std::to_string(o.rows) + "x" + std::to_string(o.cols) + " do not match");
  }
  constexpr uint64_t kMax = 0x7fffffff;
  if (m > kMax || n > kMax || k > kMax || a.ld > static_cast<int64_t>(kMax) ||
      b.ld > static_cast<int64_t>(kMax) || o.ld > static_cast<int64_t>(kMax)) {
    return refuse("a size past 2^31 - 1");
  }
  Target where;
  where.device = h.device;
  where.stream = stream;
  where.workspace = workspace;
  where.workspace_bytes = workspace_bytes;
  where.bias = d.epilogue == CUBLASLT_EPILOGUE_BIAS ? d.bias : nullptr;
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const int lda = static_cast<int>(a.ld), ldb = static_cast<int>(b.ld);
  const int ldd = static_cast<int>(o.ld);
  if (a.type == CUDA_R_32F && b.type == CUDA_R_32F && o.type == CUDA_R_32F &&
      d.scale == CUDA_R_32F &&
      (d.compute == CUBLAS_COMPUTE_32F || d.compute == CUBLAS_COMPUTE_32F_FAST_TF32)) {
    where.tf32 = d.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    return run_gemm<Plain<float>, float>(
        api, where, ta, tb, mi, ni, ki, static_cast<const float*>(alpha),
        static_cast<const float*>(A), lda, static_cast<const float*>(B), ldb,
        static_cast<const float*>(beta), static_cast<float*>(D), ldd);
  }
  if (a.type == CUDA_R_64F && b.type == CUDA_R_64F && o.type == CUDA_R_64F &&
      d.scale == CUDA_R_64F && d.compute == CUBLAS_COMPUTE_64F) {
    return run_gemm<Plain<double>, double>(
        api, where, ta, tb, mi, ni, ki, static_cast<const double*>(alpha),
        static_cast<const double*>(A), lda, static_cast<const double*>(B), ldb,
        static_cast<const double*>(beta), static_cast<double*>(D), ldd);
  }
  if (d.scale != CUDA_R_32F) return refuse("scale type " + type_name(d.scale));
  if (cublasStatus_t s = check_ex_types(api, {a.type, b.type, o.type, d.compute,
                                               CUBLAS_GEMM_DEFAULT});
      s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  const auto* a16 = static_cast<const uint16_t*>(A);
  const auto* b16 = static_cast<const uint16_t*>(B);
  const auto* alpha_f = static_cast<const float*>(alpha);
  const auto* beta_f = static_cast<const float*>(beta);
  auto* out = static_cast<float*>(D);
  if (a.type == CUDA_R_16BF) {
    return run_gemm<BFloat16Bits, float>(api, where, ta, tb, mi, ni, ki, alpha_f, a16, lda, b16,
                                         ldb, beta_f, out, ldd);
  }
  return run_gemm<Float16Bits, float>(api, where, ta, tb, mi, ni, ki, alpha_f, a16, lda, b16, ldb,
                                      beta_f, out, ldd);
}
