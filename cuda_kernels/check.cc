// CudaError messages: "<file>:<line>: <expr> failed: <library text> (<status name>)".
#include "cuda_kernels/check.h"

#include <cublas_api.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

namespace {

std::atomic<bool>& synchronous_flag() {
  static std::atomic<bool> flag = [] {
    const char* value = std::getenv("PIPEWRIGHT_CUDA_SYNC");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return flag;
}

}  // namespace

bool synchronous_launches() { return synchronous_flag().load(std::memory_order_relaxed); }

void set_synchronous_launches(bool on) { synchronous_flag().store(on, std::memory_order_relaxed); }

void check_launch(const char* kernel, const char* file, int line) {
  const std::string what = std::string("kernel ") + kernel;
  const cudaError_t launched = cudaGetLastError();
  // Under PIPEWRIGHT_CUDA_SYNC the wait comes first: a kernel that faulted may have run before
  // this check, and its sticky error then shows in cudaGetLastError too; the wait tells the two
  // apart (a launch that was refused leaves the device healthy, a fault does not).
  if (synchronous_launches()) {
    if (const cudaError_t status = cudaDeviceSynchronize(); status != cudaSuccess) {
      (void)cudaGetLastError();
      throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + what +
                          " failed while running (PIPEWRIGHT_CUDA_SYNC=1): " + error_text(status),
                      static_cast<int>(status));
    }
  }
  if (launched != cudaSuccess) {
    fail((what + " launch").c_str(), file, line, error_text(launched), static_cast<int>(launched));
  }
}

bool report(cudaError_t status, const char* expr, const char* file, int line) noexcept {
  if (status == cudaSuccess) return true;
  (void)cudaGetLastError();
  // At process exit the runtime unloads before static objects release their memory; the
  // driver reclaims it all anyway, so that is nothing to report.
  if (status == cudaErrorCudartUnloading) return false;
  std::fprintf(stderr, "pipewright: %s:%d: %s failed: %s (%s)\n", file, line, expr,
               cudaGetErrorString(status), cudaGetErrorName(status));
  return false;
}

}  // namespace pipewright::cuda
