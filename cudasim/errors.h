// The calling thread's CUDA/cuBLAS error state: the last error (cudaGetLastError), the detail
// texts that cudaGetErrorString/cublasGetStatusString append, and the tables of standard texts.
// Sticky errors live with the device (device.h); this file only remembers their details.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <string>

namespace cudasim::detail {

/// The calling thread's last error without clearing it (cudaSuccess when none).
cudaError_t peek_last_error();

/// Returns the last error and clears it.
cudaError_t take_last_error();

/// Remembers `detail` as the calling thread's text for `error` (appended by error_string)
/// without touching the last error; an empty detail forgets the previous one.
void remember_detail(cudaError_t error, const std::string& detail);

/// The standard text of `error` followed by ": <detail>" when this thread has one for it.
/// The pointer stays valid until the next error of the same code on this thread.
const char* error_string(cudaError_t error);

/// The enumerator name ("cudaErrorInvalidValue"), or "cudaErrorUnknown" for unknown codes.
const char* error_name(cudaError_t error);

/// cuBLAS counterparts: remember a detail for `status`, return text with it, and the name.
cublasStatus_t set_blas_detail(cublasStatus_t status, const std::string& detail);
const char* blas_status_string(cublasStatus_t status);
const char* blas_status_name(cublasStatus_t status);

/// True on a stream worker thread while it runs a cudaLaunchHostFunc callback: CUDA calls
/// made from there fail with cudaErrorNotPermitted.
bool in_host_callback();
void set_in_host_callback(bool inside);

}  // namespace cudasim::detail
