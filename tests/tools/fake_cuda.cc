// A stand-in for libcudart.so / libcublas.so (no GPU needed): the few functions
// apicount_driver calls, each checking that the arguments the driver passed arrived unchanged
// through //tools/gpu/apicount:libpw_apicount.so, and counting the calls it received.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <atomic>

extern "C" cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                          size_t shared_bytes, cudaStream_t stream);

namespace {
std::atomic<int> g_calls{0};
cudaStream_t const kStream = reinterpret_cast<cudaStream_t>(0x5151);
}  // namespace

extern "C" {

__attribute__((visibility("default"))) int fake_cuda_calls() { return g_calls.load(); }

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                               size_t shared_bytes, cudaStream_t stream) {
  ++g_calls;
  const bool ok = kernel == reinterpret_cast<cudaKernel_t>(0x4b) && grid.x == 7 && grid.y == 3 &&
                  grid.z == 1 && block.x == 256 && block.y == 2 && block.z == 1 &&
                  args != nullptr && shared_bytes == 4224 && stream == kStream;
  return ok ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args,
                             size_t shared_bytes, cudaStream_t stream) {
  ++g_calls;
  return func != nullptr && grid.x == 5 && block.x == 32 && shared_bytes == 0 && stream == kStream
             ? cudaSuccess
             : cudaErrorInvalidValue;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  ++g_calls;
  return dst != nullptr && src != nullptr && bytes == 1024 && stream == kStream
             ? cudaSuccess
             : cudaErrorInvalidValue;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  ++g_calls;
  return kind == cudaMemcpyDefault && bytes == 8 ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  ++g_calls;
  return stream == kStream ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  ++g_calls;
  return event != nullptr && stream == kStream ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  ++g_calls;
  return stream == kStream && event != nullptr && flags == 0 ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  ++g_calls;
  *ptr = reinterpret_cast<void*>(0x1000);
  return size == 512 ? cudaSuccess : cudaErrorMemoryAllocation;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const float* alpha, const float* a, int lda,
                              const float* b, int ldb, const float* beta, float* c, int ldc) {
  ++g_calls;
  const bool ok = h != nullptr && ta == CUBLAS_OP_T && tb == CUBLAS_OP_N && m == 2 && n == 3 &&
                  k == 4 && *alpha == 1.5f && a != nullptr && lda == 4 && b != nullptr &&
                  ldb == 4 && *beta == 0.0f && c != nullptr && ldc == 2;
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// The mixed-precision GEMM: the type arguments too must arrive unchanged (the interposer
// forwards them through a hand-written function type).
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void* alpha, const void* a, cudaDataType a_type,
                            int lda, const void* b, cudaDataType b_type, int ldb,
                            const void* beta, void* c, cudaDataType c_type, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  ++g_calls;
  const bool ok = h != nullptr && ta == CUBLAS_OP_N && tb == CUBLAS_OP_T && m == 3 && n == 2 &&
                  k == 4 && *static_cast<const float*>(alpha) == 2.0f && a != nullptr &&
                  a_type == CUDA_R_16BF && lda == 3 && b != nullptr && b_type == CUDA_R_16BF &&
                  ldb == 2 && *static_cast<const float*>(beta) == 1.0f && c != nullptr &&
                  c_type == CUDA_R_32F && ldc == 3 && compute == CUBLAS_COMPUTE_32F &&
                  algo == CUBLAS_GEMM_DEFAULT;
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

}  // extern "C"
