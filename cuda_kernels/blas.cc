// cuBLAS handle pool (see blas.h).
#include "cuda_kernels/blas.h"

#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "cuda_kernels/check.h"

namespace pipewright::cuda {
namespace {

std::atomic<bool> g_allow_tf32{false};

/// Idle handles per device. Leaked on purpose: see blas.h.
struct Pool {
  std::mutex mutex;
  std::map<int, std::vector<cublasHandle_t>> idle;
};

Pool& pool() {
  static Pool* p = new Pool();
  return *p;
}

/// The handles one thread holds; gives them back to the pool when the thread ends.
struct ThreadHandles {
  std::map<int, cublasHandle_t> by_device;
  ~ThreadHandles() {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    for (auto& [device, handle] : by_device) p.idle[device].push_back(handle);
  }
};

cublasHandle_t acquire(int device_index) {
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    auto& idle = p.idle[device_index];
    if (!idle.empty()) {
      cublasHandle_t h = idle.back();
      idle.pop_back();
      return h;
    }
  }
  cublasHandle_t h = nullptr;
  PW_CUDA_CHECK(cublasCreate(&h));  // binds to the current device
  return h;
}

}  // namespace

cublasHandle_t blas_handle(int device_index, cudaStream_t stream) {
  thread_local ThreadHandles handles;
  auto it = handles.by_device.find(device_index);
  if (it == handles.by_device.end()) {
    it = handles.by_device.emplace(device_index, acquire(device_index)).first;
  }
  cublasHandle_t h = it->second;
  PW_CUDA_CHECK(cublasSetStream(h, stream));
  PW_CUDA_CHECK(cublasSetMathMode(
      h, g_allow_tf32.load(std::memory_order_relaxed) ? CUBLAS_TF32_TENSOR_OP_MATH
                                                      : CUBLAS_DEFAULT_MATH));
  return h;
}

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

}  // namespace pipewright::cuda
