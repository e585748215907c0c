// libpw_apicount.so: counts the CUDA runtime and cuBLAS calls a process makes, for
// tools/gpu/check.sh's apicount step (docs/cuda.md, "Counting a step's CUDA calls on a card").
//
//   LD_PRELOAD=libpw_apicount.so PIPEWRIGHT_APICOUNT_OUT=counts.txt program ...
//
// Each function below has the name and signature of a CUDA runtime or cuBLAS function (the
// toolkit's headers declare them, so a mismatch does not compile). Preloaded, it comes before
// libcudart.so.13 / libcublas.so.13 in the dynamic linker's search, so the program's calls
// land here; each adds one to its counter and forwards to the real function, found with
// dlsym(RTLD_NEXT). That works because the project links cudart and cuBLAS as shared
// libraries in every build, --dynamic_mode=off included (third_party/cuda/cuda.BUILD). A
// statically linked cudart could not be interposed so (the calls would bind inside the
// executable); CUPTI's callback API would then be the way.
//
// What is counted, under cudasim's names (cudasim::api_counts, as
// tests/cuda/step_api_count_test.cc reads them), so the two compare line by line:
//   "kernel launch"   our kernels: nvcc's <<<>>> calls __cudaLaunchKernel in CUDA 13 (not
//                     cudaLaunchKernel, which is counted too). cuBLAS's own kernels are not
//                     seen: libcublas carries its own static cudart.
//   "cublasSgemm"     one per cublasSgemm_v2 call (cublas_v2.h's cublasSgemm); likewise, each
//                     under its own name, Dgemm, the strided-batched S/D GEMMs and the
//                     mixed-precision cublasGemmEx and cublasGemmStridedBatchedEx, and
//                     cuBLASLt's cublasLtMatmul (a Linear's GEMM with its bias; calls made
//                     from inside libcublas itself are not the program's and not counted);
//   "cudaMemcpyAsync HostToDevice" and the other kinds, named by the kind argument as cudasim
//                     names them;
//   syncs, event records and waits, allocations, event and stream creation; and a few calls
//   cudasim does not count (cudaEventQuery, cudaSetDevice, cublasSetStream, ...), which the
//   comparison shows on one side only.
//
// At exit (a destructor, after the program's own static destructors) the counts are written
// to PIPEWRIGHT_APICOUNT_OUT ("%p" in it becomes the process id), or to stderr, one line each:
//   card <count> <name>          a call seen here (zero counts are left out)
//   cudasim <count> <name>       when the process is a cudasim build: cudasim's own counters,
//                                read through cudasim::api_counts() (exported: -rdynamic)
//   # ...                        the process id; each function called whose real one was
//                                not found (its calls then fail with cudaErrorSymbolNotFound)
// A process that ends without exit() (abort, _exit, a crash) writes nothing, and one that
// made no call leaves an existing file alone.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

// nvcc's launch stub calls these (crt/device_functions.h declares them for nvcc only).
extern "C" cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                          size_t shared_bytes, cudaStream_t stream);
extern "C" cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block,
                                               void** args, size_t shared_bytes,
                                               cudaStream_t stream);

namespace {

// One counter per name. The memory copies have one per cudaMemcpyKind (0..4).
enum Counter : int {
  kLaunch,
  kSgemm,
  kDgemm,
  kSgemmStridedBatched,
  kDgemmStridedBatched,
  kGemmEx,
  kGemmStridedBatchedEx,
  kLtMatmul,
  kBlasSetStream,
  kBlasSetWorkspace,
  kBlasSetMathMode,
  kStreamSynchronize,
  kDeviceSynchronize,
  kEventSynchronize,
  kEventRecord,
  kEventRecordWithFlags,
  kStreamWaitEvent,
  kEventQuery,
  kStreamQuery,
  kEventCreate,
  kEventCreateWithFlags,
  kEventDestroy,
  kStreamCreate,
  kStreamCreateWithFlags,
  kStreamCreateWithPriority,
  kStreamDestroy,
  kMalloc,
  kFree,
  kMallocHost,
  kHostAlloc,
  kFreeHost,
  kMemset,
  kMemsetAsync,
  kLaunchHostFunc,
  kSetDevice,
  kMemcpyPeerAsync,
  kMemcpy0,                 // cudaMemcpy <kind>, 5 of them
  kMemcpyAsync0 = kMemcpy0 + 5,  // cudaMemcpyAsync <kind>, 5 of them
  kCounters = kMemcpyAsync0 + 5,
};

const char* const kKinds[5] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice",
                               "Default"};

std::string counter_name(int c) {
  static const char* const names[kMemcpy0] = {
      "kernel launch",
      "cublasSgemm",
      "cublasDgemm",
      "cublasSgemmStridedBatched",
      "cublasDgemmStridedBatched",
      "cublasGemmEx",
      "cublasGemmStridedBatchedEx",
      "cublasLtMatmul",
      "cublasSetStream",
      "cublasSetWorkspace",
      "cublasSetMathMode",
      "cudaStreamSynchronize",
      "cudaDeviceSynchronize",
      "cudaEventSynchronize",
      "cudaEventRecord",
      "cudaEventRecordWithFlags",
      "cudaStreamWaitEvent",
      "cudaEventQuery",
      "cudaStreamQuery",
      "cudaEventCreate",
      "cudaEventCreateWithFlags",
      "cudaEventDestroy",
      "cudaStreamCreate",
      "cudaStreamCreateWithFlags",
      "cudaStreamCreateWithPriority",
      "cudaStreamDestroy",
      "cudaMalloc",
      "cudaFree",
      "cudaMallocHost",
      "cudaHostAlloc",
      "cudaFreeHost",
      "cudaMemset",
      "cudaMemsetAsync",
      "cudaLaunchHostFunc",
      "cudaSetDevice",
      "cudaMemcpyPeerAsync DeviceToDevice",  // cudasim's name: a device-to-device copy
  };
  if (c < kMemcpy0) return names[c];
  if (c < kMemcpyAsync0) return std::string("cudaMemcpy ") + kKinds[c - kMemcpy0];
  return std::string("cudaMemcpyAsync ") + kKinds[c - kMemcpyAsync0];
}

std::atomic<int64_t> g_counts[kCounters];

// Functions called whose real one was not found, reported at exit.
const char* g_missing_names[64];
std::atomic<int> g_missing_count{0};

inline void count(int c) { g_counts[c].fetch_add(1, std::memory_order_relaxed); }

int memcpy_counter(int first, cudaMemcpyKind kind) {
  const int k = static_cast<int>(kind);
  return first + (k >= 0 && k < 5 ? k : 4);
}

void note_missing(const char* name) {
  const int i = g_missing_count.fetch_add(1);
  if (i < 64) g_missing_names[i] = name;
  std::fprintf(stderr, "libpw_apicount: no real %s after this library (dlsym RTLD_NEXT)\n", name);
}

// The next definition of `name` in the loader's search order: libcudart's or libcublas's (or
// cudasim's, where a cudasim build exports one). Looked up once per function.
template <class F>
F next(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (p == nullptr) note_missing(name);
  return reinterpret_cast<F>(p);
}

}  // namespace

// Each wrapper: count, then forward. REAL(f) is the real f, or returns `fail` when absent.
#define REAL(name, fail)                                            \
  static const auto real = next<decltype(&name)>(#name);           \
  if (real == nullptr) return fail

// REAL_AS(f, type): the same for a name C++ overloads, whose type decltype cannot pick
// (cublas_api.h adds inline *Ex GEMMs taking the old cudaDataType compute type).
#define REAL_AS(name, type, fail)                                   \
  static const auto real = next<type>(#name);                      \
  if (real == nullptr) return fail

#define CUDA_FAIL cudaErrorSymbolNotFound
#define BLAS_FAIL CUBLAS_STATUS_NOT_SUPPORTED

extern "C" {

// ---- kernel launches ----
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                               size_t shared_bytes, cudaStream_t stream) {
  count(kLaunch);
  REAL(__cudaLaunchKernel, CUDA_FAIL);
  return real(kernel, grid, block, args, shared_bytes, stream);
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                    size_t shared_bytes, cudaStream_t stream) {
  count(kLaunch);
  REAL(__cudaLaunchKernel_ptsz, CUDA_FAIL);
  return real(kernel, grid, block, args, shared_bytes, stream);
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args,
                             size_t shared_bytes, cudaStream_t stream) {
  count(kLaunch);
  REAL(cudaLaunchKernel, CUDA_FAIL);
  return real(func, grid, block, args, shared_bytes, stream);
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  count(kLaunch);
  REAL(cudaLaunchKernelExC, CUDA_FAIL);
  return real(config, func, args);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  count(kLaunchHostFunc);
  REAL(cudaLaunchHostFunc, CUDA_FAIL);
  return real(stream, fn, user_data);
}

// ---- cuBLAS ----
cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const float* alpha, const float* a, int lda,
                              const float* b, int ldb, const float* beta, float* c, int ldc) {
  count(kSgemm);
  REAL(cublasSgemm_v2, BLAS_FAIL);
  return real(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

cublasStatus_t cublasDgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const double* alpha, const double* a, int lda,
                              const double* b, int ldb, const double* beta, double* c, int ldc) {
  count(kDgemm);
  REAL(cublasDgemm_v2, BLAS_FAIL);
  return real(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float* alpha, const float* a, int lda,
                                         long long int stride_a, const float* b, int ldb,
                                         long long int stride_b, const float* beta, float* c,
                                         int ldc, long long int stride_c, int batch) {
  count(kSgemmStridedBatched);
  REAL(cublasSgemmStridedBatched, BLAS_FAIL);
  return real(h, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
              stride_c, batch);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const double* alpha, const double* a, int lda,
                                         long long int stride_a, const double* b, int ldb,
                                         long long int stride_b, const double* beta, double* c,
                                         int ldc, long long int stride_c, int batch) {
  count(kDgemmStridedBatched);
  REAL(cublasDgemmStridedBatched, BLAS_FAIL);
  return real(h, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
              stride_c, batch);
}

using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                  int, const void*, const void*, cudaDataType, int, const void*,
                                  cudaDataType, int, const void*, void*, cudaDataType, int,
                                  cublasComputeType_t, cublasGemmAlgo_t);
using GemmStridedBatchedEx = cublasStatus_t (*)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
    cudaDataType, int, long long int, const void*, cudaDataType, int, long long int, const void*,
    void*, cudaDataType, int, long long int, int, cublasComputeType_t, cublasGemmAlgo_t);

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void* alpha, const void* a, cudaDataType a_type,
                            int lda, const void* b, cudaDataType b_type, int ldb,
                            const void* beta, void* c, cudaDataType c_type, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  count(kGemmEx);
  REAL_AS(cublasGemmEx, GemmEx, BLAS_FAIL);
  return real(h, ta, tb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c, c_type, ldc,
              compute, algo);
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t a_layout, const void* b,
                              cublasLtMatrixLayout_t b_layout, const void* beta, const void* c,
                              cublasLtMatrixLayout_t c_layout, void* d,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  // libcublas imports cublasLtMatmul too: a call from inside it is cuBLAS's own work, not
  // one of the program's calls, and is left out.
  Dl_info caller{};
  if (dladdr(__builtin_return_address(0), &caller) == 0 || caller.dli_fname == nullptr ||
      std::strstr(caller.dli_fname, "libcublas") == nullptr) {
    count(kLtMatmul);
  }
  REAL(cublasLtMatmul, BLAS_FAIL);
  return real(h, desc, alpha, a, a_layout, b, b_layout, beta, c, c_layout, d, d_layout, algo,
              workspace, workspace_bytes, stream);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void* alpha, const void* a, cudaDataType a_type,
                                          int lda, long long int stride_a, const void* b,
                                          cudaDataType b_type, int ldb, long long int stride_b,
                                          const void* beta, void* c, cudaDataType c_type,
                                          int ldc, long long int stride_c, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  count(kGemmStridedBatchedEx);
  REAL_AS(cublasGemmStridedBatchedEx, GemmStridedBatchedEx, BLAS_FAIL);
  return real(h, ta, tb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b, beta,
              c, c_type, ldc, stride_c, batch, compute, algo);
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t stream) {
  count(kBlasSetStream);
  REAL(cublasSetStream_v2, BLAS_FAIL);
  return real(h, stream);
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void* workspace, size_t bytes) {
  count(kBlasSetWorkspace);
  REAL(cublasSetWorkspace_v2, BLAS_FAIL);
  return real(h, workspace, bytes);
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  count(kBlasSetMathMode);
  REAL(cublasSetMathMode, BLAS_FAIL);
  return real(h, mode);
}

// ---- host waits ----
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  count(kStreamSynchronize);
  REAL(cudaStreamSynchronize, CUDA_FAIL);
  return real(stream);
}

cudaError_t cudaDeviceSynchronize(void) {
  count(kDeviceSynchronize);
  REAL(cudaDeviceSynchronize, CUDA_FAIL);
  return real();
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  count(kEventSynchronize);
  REAL(cudaEventSynchronize, CUDA_FAIL);
  return real(event);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  count(kEventQuery);
  REAL(cudaEventQuery, CUDA_FAIL);
  return real(event);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  count(kStreamQuery);
  REAL(cudaStreamQuery, CUDA_FAIL);
  return real(stream);
}

// ---- events and streams ----
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  count(kEventRecord);
  REAL(cudaEventRecord, CUDA_FAIL);
  return real(event, stream);
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  count(kEventRecordWithFlags);
  REAL(cudaEventRecordWithFlags, CUDA_FAIL);
  return real(event, stream, flags);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  count(kStreamWaitEvent);
  REAL(cudaStreamWaitEvent, CUDA_FAIL);
  return real(stream, event, flags);
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  count(kEventCreate);
  REAL(cudaEventCreate, CUDA_FAIL);
  return real(event);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  count(kEventCreateWithFlags);
  REAL(cudaEventCreateWithFlags, CUDA_FAIL);
  return real(event, flags);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  count(kEventDestroy);
  REAL(cudaEventDestroy, CUDA_FAIL);
  return real(event);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  count(kStreamCreate);
  REAL(cudaStreamCreate, CUDA_FAIL);
  return real(stream);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  count(kStreamCreateWithFlags);
  REAL(cudaStreamCreateWithFlags, CUDA_FAIL);
  return real(stream, flags);
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
  count(kStreamCreateWithPriority);
  REAL(cudaStreamCreateWithPriority, CUDA_FAIL);
  return real(stream, flags, priority);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  count(kStreamDestroy);
  REAL(cudaStreamDestroy, CUDA_FAIL);
  return real(stream);
}

cudaError_t cudaSetDevice(int device) {
  count(kSetDevice);
  REAL(cudaSetDevice, CUDA_FAIL);
  return real(device);
}

// ---- memory ----
cudaError_t cudaMalloc(void** ptr, size_t size) {
  count(kMalloc);
  REAL(cudaMalloc, CUDA_FAIL);
  return real(ptr, size);
}

cudaError_t cudaFree(void* ptr) {
  count(kFree);
  REAL(cudaFree, CUDA_FAIL);
  return real(ptr);
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  count(kMallocHost);
  REAL(cudaMallocHost, CUDA_FAIL);
  return real(ptr, size);
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  count(kHostAlloc);
  REAL(cudaHostAlloc, CUDA_FAIL);
  return real(ptr, size, flags);
}

cudaError_t cudaFreeHost(void* ptr) {
  count(kFreeHost);
  REAL(cudaFreeHost, CUDA_FAIL);
  return real(ptr);
}

cudaError_t cudaMemset(void* ptr, int value, size_t count_bytes) {
  count(kMemset);
  REAL(cudaMemset, CUDA_FAIL);
  return real(ptr, value, count_bytes);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count_bytes, cudaStream_t stream) {
  count(kMemsetAsync);
  REAL(cudaMemsetAsync, CUDA_FAIL);
  return real(ptr, value, count_bytes, stream);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  count(memcpy_counter(kMemcpy0, kind));
  REAL(cudaMemcpy, CUDA_FAIL);
  return real(dst, src, bytes, kind);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  count(memcpy_counter(kMemcpyAsync0, kind));
  REAL(cudaMemcpyAsync, CUDA_FAIL);
  return real(dst, src, bytes, kind, stream);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                size_t bytes, cudaStream_t stream) {
  count(kMemcpyPeerAsync);
  REAL(cudaMemcpyPeerAsync, CUDA_FAIL);
  return real(dst, dst_device, src, src_device, bytes, stream);
}

}  // extern "C"

namespace {

// cudasim::api_counts() (cudasim/cudasim.h), where this process is a cudasim build: its
// runtime is linked with -rdynamic, so the executable exports it. Itanium mangling of
// `std::map<std::string, int64_t> cudasim::api_counts()` (the cxx11 ABI tag of std::string).
using SimCounts = std::map<std::string, int64_t> (*)();
constexpr const char* kSimCounts = "_ZN7cudasim10api_countsB5cxx11Ev";

// Writes the counts (see the file comment) when the process exits.
__attribute__((destructor)) void write_counts() {
  const char* path = std::getenv("PIPEWRIGHT_APICOUNT_OUT");
  const auto sim = reinterpret_cast<SimCounts>(dlsym(RTLD_DEFAULT, kSimCounts));
  bool counted = sim != nullptr;
  for (int c = 0; c < kCounters; ++c) counted = counted || g_counts[c].load() != 0;
  FILE* out = stderr;
  std::string file;
  if (path == nullptr || *path == '\0') {
    if (!counted) return;  // nothing to say on stderr
  } else {
    file = path;
    const size_t p = file.find("%p");
    if (p != std::string::npos) file.replace(p, 2, std::to_string(getpid()));
    // A process that made no CUDA call (a helper the variables reached too) never replaces
    // another's counts.
    if (!counted && access(file.c_str(), F_OK) == 0) return;
    out = std::fopen(file.c_str(), "w");
    if (out == nullptr) {
      std::fprintf(stderr, "libpw_apicount: cannot write %s\n", file.c_str());
      return;
    }
  }
  std::fprintf(out, "# libpw_apicount: process %d\n", static_cast<int>(getpid()));
  for (int c = 0; c < kCounters; ++c) {
    const int64_t n = g_counts[c].load();
    if (n == 0) continue;
    std::fprintf(out, "card %lld %s\n", static_cast<long long>(n), counter_name(c).c_str());
  }
  const int missing = std::min(g_missing_count.load(), 64);
  for (int i = 0; i < missing; ++i) {
    std::fprintf(out, "# no real function: %s\n", g_missing_names[i]);
  }
  if (sim != nullptr) {
    std::fprintf(out, "# cudasim build: its own counters follow\n");
    for (const auto& [name, n] : sim()) {
      std::fprintf(out, "cudasim %lld %s\n", static_cast<long long>(n), name.c_str());
    }
  }
  if (out != stderr) std::fclose(out);
}

}  // namespace
