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
// Kernel launches report configuration errors lazily; PW_CUDA_CHECK_LAUNCH("kernel") after a
// <<<>>> launch turns them into a CudaError at the launch site. A fault *inside* a kernel
// (an illegal address, a trap) surfaces only at a later call that waits for the device, often
// in another thread and another file. Note [Synchronous launches]: with PIPEWRIGHT_CUDA_SYNC=1
// in the environment (CUDA_LAUNCH_BLOCKING's counterpart), every launch and every cuBLAS call
// is followed by a device synchronisation and a check, so the CudaError names the kernel and
// its launch site:
//   "cuda_kernels/elementwise.cu:133: kernel binary_kernel failed while running
//    (PIPEWRIGHT_CUDA_SYNC=1): an illegal memory access was encountered (cudaErrorIllegalAddress)"
// It serialises the GPU's work: a debugging switch, not a mode to train in.
//
// Code that must not throw (destructors, cleanup after another error) reports a failed call
// on stderr instead of dropping it: PW_CUDA_REPORT(expr).
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

/// True when launches are checked synchronously (Note [Synchronous launches]): the
/// environment's PIPEWRIGHT_CUDA_SYNC=1 (read at the first call), unless
/// set_synchronous_launches() said otherwise since.
bool synchronous_launches();
/// Turns synchronous launch checks on or off for the whole process, from now on (the switch
/// a debugger or a test flips without restarting).
void set_synchronous_launches(bool on);

/// After launching `kernel` (a name for messages) on the current device: throws CudaError
/// "<file>:<line>: kernel <kernel> launch failed: <text>" for a launch error, and under
/// synchronous_launches() waits for the device and throws "... failed while running
/// (PIPEWRIGHT_CUDA_SYNC=1): <text>" when it, or anything before it on the device, faulted.
/// Used through PW_CUDA_CHECK_LAUNCH.
void check_launch(const char* kernel, const char* file, int line);

/// For code that must not throw: when `status` is an error, prints
/// "pipewright: <file>:<line>: <expr> failed: <text>" on stderr and clears the last error
/// (silently for cudaErrorCudartUnloading: the runtime going away at process exit). Returns
/// status == cudaSuccess. Used through PW_CUDA_REPORT.
bool report(cudaError_t status, const char* expr, const char* file, int line) noexcept;

}  // namespace pipewright::cuda

#define PW_CUDA_CHECK(expr) ::pipewright::cuda::check((expr), #expr, __FILE__, __LINE__)

/// After a kernel launch: a bad launch configuration becomes a CudaError here (and, under
/// PIPEWRIGHT_CUDA_SYNC=1, a fault while it runs).
#define PW_CUDA_CHECK_LAUNCH(kernel) ::pipewright::cuda::check_launch((kernel), __FILE__, __LINE__)

/// In destructors: a failed call is printed on stderr, never thrown.
#define PW_CUDA_REPORT(expr) ::pipewright::cuda::report((expr), #expr, __FILE__, __LINE__)
