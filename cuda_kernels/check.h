// The one CUDA checking macro: PW_CUDA_CHECK(expr) for every status type the backend meets.
//
//   PW_CUDA_CHECK(cudaMalloc(&p, bytes));              // cudaError_t
//   PW_CUDA_CHECK(cublasSgemm(handle, ...));           // cublasStatus_t
//
// (cuDNN is used by the GPU benchmark only, which checks its status itself: the library does
// not link cuDNN, so --config=cudasim has nothing of it to simulate.)
//
// On failure it throws CudaError, a std::runtime_error whose message names the file:line, the
// failing expression and the library's own error text, e.g.
//   "cuda_kernels/caching_allocator.cc:88: cudaMalloc(&ptr, size) failed: out of memory
//    (cudaErrorMemoryAllocation)"
// The library never calls exit() or abort(): a CUDA failure is an exception like any other,
// which a pipeline worker hands back to the caller.
//
// Kernel launches report configuration errors lazily; PW_CUDA_CHECK_LAUNCH() after a <<<>>>
// launch turns them into a CudaError at the launch site.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace pipewright::cuda {

/// Thrown for every failed CUDA runtime or cuBLAS call. code() is the raw status value
/// (cudaError_t or cublasStatus_t, as an int).
class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& message, int code) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

/// Throws CudaError unless `status` is success. Used through PW_CUDA_CHECK, which fills in
/// the expression text and the call site; overloaded per library status type.
void check(cudaError_t status, const char* expr, const char* file, int line);
void check(cublasStatus_t status, const char* expr, const char* file, int line);

/// The CUDA runtime's text for `status`, e.g. "out of memory (cudaErrorMemoryAllocation)".
std::string error_text(cudaError_t status);

}  // namespace pipewright::cuda

#define PW_CUDA_CHECK(expr) ::pipewright::cuda::check((expr), #expr, __FILE__, __LINE__)

/// After a kernel launch: a bad launch configuration becomes a CudaError here.
#define PW_CUDA_CHECK_LAUNCH() \
  ::pipewright::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
