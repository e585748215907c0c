// CudaError messages: "<file>:<line>: <expr> failed: <library text> (<status name>)".
#include "cuda_kernels/check.h"

#include <cublas_api.h>

namespace pipewright::cuda {
namespace {

[[noreturn]] void fail(const char* expr, const char* file, int line, const std::string& text,
                       int code) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + expr +
                      " failed: " + text,
                  code);
}

}  // namespace

std::string error_text(cudaError_t status) {
  return std::string(cudaGetErrorString(status)) + " (" + cudaGetErrorName(status) + ")";
}

void check(cudaError_t status, const char* expr, const char* file, int line) {
  if (status == cudaSuccess) return;
  // A failed call leaves a "last error" behind; clear it so that it does not resurface at an
  // unrelated PW_CUDA_CHECK_LAUNCH later (sticky errors, such as a kernel fault, stay anyway).
  (void)cudaGetLastError();
  fail(expr, file, line, error_text(status), static_cast<int>(status));
}

void check(cublasStatus_t status, const char* expr, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(expr, file, line,
       std::string(cublasGetStatusString(status)) + " (" + cublasGetStatusName(status) + ")",
       static_cast<int>(status));
}

}  // namespace pipewright::cuda
