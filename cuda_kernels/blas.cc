// cuBLAS handle pool and per-(handle, stream) workspaces (see blas.h).
//
// Note [One workspace per handle and stream]
// cuBLAS kernels use a workspace: by default a pool the handle owns, shared by every stream
// the handle is ever bound to. A handle moves between threads (returned to the pool when its
// thread exits, with its GEMMs possibly still queued) and between streams (cublasSetStream on
// each call), so with the default pool a GEMM on one stream could overwrite the workspace a
// GEMM of another stream is still reading:
//
//   thread A (exits):  handle h on stream SA: ══ gemm (workspace W_h) ══►   (still running)
//   thread B (later):  handle h on stream SB:     ══ gemm (workspace W_h) ══►  same bytes!
//
// As PyTorch does (CublasHandlePool.cpp), every (handle, stream) pair gets its own workspace,
// installed with cublasSetWorkspace *after* cublasSetStream (which resets the handle to its
// default pool, says the cuBLAS documentation). Work on one workspace is then always on one
// stream, in that stream's order, whichever thread issues it.
//
// The workspaces are cudaMalloc'ed once and kept for the life of the process, not taken
// from the caching allocator: a pair can be used again at any time (streams and handles are
// pooled and never destroyed, Note [Pooled streams] in backend.cc), so a workspace is never
// freed and the allocator's reuse would buy nothing; its counters (allocated, peak, tested
// to match the CPU's exactly) stay free of a cuBLAS implementation detail; and empty_cache()
// can never release memory a queued GEMM still uses. Their number is bounded by handles ×
// streams per device actually paired (a few per worker); each is kBlasWorkspaceBytes.
#include "cuda_kernels/blas.h"

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cuda_kernels/check.h"
#include "tensor/matmul_precision.h"

namespace pipewright::cuda {
namespace {


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

/// Note [One workspace per handle and stream]: never freed, like the handles.
struct Workspaces {
  std::mutex mutex;
  std::map<std::pair<cublasHandle_t, cudaStream_t>, void*> by_pair;
};

Workspaces& workspaces() {
  static Workspaces* w = new Workspaces();
  return *w;
}

/// The workspace of (h, stream), cudaMalloc'ed on the current device on first use.
void* workspace(int device_index, cublasHandle_t h, cudaStream_t stream) {
  Workspaces& w = workspaces();
  std::lock_guard<std::mutex> lock(w.mutex);
  void*& slot = w.by_pair[{h, stream}];
  if (slot == nullptr) {
    const cudaError_t status = cudaMalloc(&slot, kBlasWorkspaceBytes);
    if (status != cudaSuccess) {
      slot = nullptr;
      w.by_pair.erase({h, stream});
      (void)cudaGetLastError();
      throw CudaError("cuBLAS workspace of " + std::to_string(kBlasWorkspaceBytes) +
                      " bytes on cuda:" + std::to_string(device_index) +
                      ": cudaMalloc failed: " + cudaGetErrorString(status),
                      static_cast<int>(status));
    }
  }
  return slot;
}

}  // namespace

size_t blas_workspace_count() {
  Workspaces& w = workspaces();
  std::lock_guard<std::mutex> lock(w.mutex);
  return w.by_pair.size();
}

void* blas_workspace(int device_index, cublasHandle_t h, cudaStream_t stream) {
  return workspace(device_index, h, stream);
}

namespace {
std::atomic<bool> g_bias_epilogue{true};
}  // namespace

void set_bias_epilogue(bool enabled) { g_bias_epilogue.store(enabled); }
bool bias_epilogue() { return g_bias_epilogue.load(); }

cublasHandle_t blas_handle(int device_index, cudaStream_t stream) {
  thread_local ThreadHandles handles;
  auto it = handles.by_device.find(device_index);
  if (it == handles.by_device.end()) {
    it = handles.by_device.emplace(device_index, acquire(device_index)).first;
  }
  cublasHandle_t h = it->second;
  PW_CUDA_CHECK(cublasSetStream(h, stream));
  // After cublasSetStream, which resets the workspace (Note [One workspace per handle and
  // stream]).
  PW_CUDA_CHECK(cublasSetWorkspace(h, workspace(device_index, h, stream), kBlasWorkspaceBytes));
  PW_CUDA_CHECK(cublasSetMathMode(h, allow_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH
                                                   : CUBLAS_DEFAULT_MATH));
  return h;
}

void set_allow_tf32(bool allow) {
  set_float32_matmul_precision(allow ? Float32MatmulPrecision::kHigh
                                     : Float32MatmulPrecision::kHighest);
}
bool allow_tf32() { return float32_matmul_precision() == Float32MatmulPrecision::kHigh; }

}  // namespace pipewright::cuda
