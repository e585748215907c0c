#include "cudasim/errors.h"

#include <map>

#include "cudasim/sim_internal.h"

namespace cudasim {
namespace detail {
namespace {

struct ThreadErrors {
  cudaError_t last = cudaSuccess;
  std::map<int, std::string> details;       // code -> detail of this thread's latest error
  std::map<int, std::string> texts;         // code -> buffer returned by error_string
  std::map<int, std::string> blas_details;  // cublasStatus_t -> detail
  std::map<int, std::string> blas_texts;
  bool in_callback = false;
};

ThreadErrors& mine() {
  thread_local ThreadErrors errors;
  return errors;
}

// X(enumerator, standard text): the codes the simulator returns plus a few common neighbours.
#define CUDASIM_ERRORS(X)                                                              \
  X(cudaSuccess, "no error")                                                           \
  X(cudaErrorInvalidValue, "invalid argument")                                         \
  X(cudaErrorMemoryAllocation, "out of memory")                                        \
  X(cudaErrorInitializationError, "initialization error")                              \
  X(cudaErrorInvalidConfiguration, "invalid configuration argument")                   \
  X(cudaErrorInvalidDevicePointer, "invalid device pointer")                           \
  X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")              \
  X(cudaErrorInsufficientDriver,                                                       \
    "CUDA driver version is insufficient for CUDA runtime version")                    \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                           \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                                  \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                         \
  X(cudaErrorIllegalState, "the operation cannot be performed in the present state")   \
  X(cudaErrorNotReady, "device not ready")                                             \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")               \
  X(cudaErrorLaunchOutOfResources, "too many resources requested for launch")          \
  X(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled")               \
  X(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled")                 \
  X(cudaErrorNotPermitted, "operation not permitted")                                  \
  X(cudaErrorNotSupported, "operation not supported")                                  \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                              \
  X(cudaErrorUnknown, "unknown error")

const char* standard_text(cudaError_t error) {
  switch (error) {
#define CUDASIM_TEXT(code, text) \
  case code:                     \
    return text;
    CUDASIM_ERRORS(CUDASIM_TEXT)
#undef CUDASIM_TEXT
    default:
      return "unrecognized error code";
  }
}

#define CUDASIM_BLAS(X)                                                    \
  X(CUBLAS_STATUS_SUCCESS, "success")                                      \
  X(CUBLAS_STATUS_NOT_INITIALIZED, "the library was not initialized")      \
  X(CUBLAS_STATUS_ALLOC_FAILED, "the resource allocation failed")          \
  X(CUBLAS_STATUS_INVALID_VALUE, "an invalid numeric value was used as an argument") \
  X(CUBLAS_STATUS_ARCH_MISMATCH, "an absent device architectural feature is required") \
  X(CUBLAS_STATUS_MAPPING_ERROR, "an access to GPU memory space failed")   \
  X(CUBLAS_STATUS_EXECUTION_FAILED, "the GPU program failed to execute")   \
  X(CUBLAS_STATUS_INTERNAL_ERROR, "an internal operation failed")          \
  X(CUBLAS_STATUS_NOT_SUPPORTED, "the functionality requested is not supported") \
  X(CUBLAS_STATUS_LICENSE_ERROR, "license error")

const char* with_detail(std::map<int, std::string>& details, std::map<int, std::string>& texts,
                        int code, const char* standard) {
  std::string& text = texts[code];
  text = standard;
  auto it = details.find(code);
  if (it != details.end() && !it->second.empty()) text += ": " + it->second;
  return text.c_str();
}

}  // namespace

cudaError_t peek_last_error() { return mine().last; }

cudaError_t take_last_error() {
  const cudaError_t last = mine().last;
  mine().last = cudaSuccess;
  return last;
}

void remember_detail(cudaError_t error, const std::string& detail) {
  mine().details[static_cast<int>(error)] = detail;
}

const char* error_string(cudaError_t error) {
  ThreadErrors& e = mine();
  return with_detail(e.details, e.texts, static_cast<int>(error), standard_text(error));
}

const char* error_name(cudaError_t error) {
  switch (error) {
#define CUDASIM_NAME(code, text) \
  case code:                     \
    return #code;
    CUDASIM_ERRORS(CUDASIM_NAME)
#undef CUDASIM_NAME
    default:
      return "cudaErrorUnknown";
  }
}

cublasStatus_t set_blas_detail(cublasStatus_t status, const std::string& detail) {
  mine().blas_details[static_cast<int>(status)] = detail;
  return status;
}

const char* blas_status_string(cublasStatus_t status) {
  const char* standard = "unknown error";
  switch (status) {
#define CUDASIM_BLAS_TEXT(code, text) \
  case code:                          \
    standard = text;                  \
    break;
    CUDASIM_BLAS(CUDASIM_BLAS_TEXT)
#undef CUDASIM_BLAS_TEXT
    default:
      break;
  }
  ThreadErrors& e = mine();
  return with_detail(e.blas_details, e.blas_texts, static_cast<int>(status), standard);
}

const char* blas_status_name(cublasStatus_t status) {
  switch (status) {
#define CUDASIM_BLAS_NAME(code, text) \
  case code:                          \
    return #code;
    CUDASIM_BLAS(CUDASIM_BLAS_NAME)
#undef CUDASIM_BLAS_NAME
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}

bool in_host_callback() { return mine().in_callback; }
void set_in_host_callback(bool inside) { mine().in_callback = inside; }

}  // namespace detail

cudaError_t set_last_error(cudaError_t error, const std::string& detail) {
  if (error == cudaSuccess) return error;
  detail::mine().last = error;
  detail::remember_detail(error, detail);
  return error;
}

}  // namespace cudasim
