#include "cuda_kernels/pinned_staging.h"

#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cuda_kernels/check.h"
#include "cuda_kernels/device_guard.h"

namespace pipewright::cuda {

PinnedStaging::~PinnedStaging() {
  for (auto& [key, blocks] : blocks_) {
    for (Block& b : blocks) {
      PW_CUDA_REPORT(cudaEventSynchronize(b.done));
      PW_CUDA_REPORT(cudaEventDestroy(b.done));
      PW_CUDA_REPORT(cudaFreeHost(b.ptr));
    }
  }
}

size_t PinnedStaging::block_size(size_t bytes) {
  return bytes <= kMinBlock ? kMinBlock : std::bit_ceil(bytes);
}

int64_t PinnedStaging::blocks_made() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return made_;
}

// A block of the class whose last copy has completed, taken out of the pool; else a new one.
PinnedStaging::Block PinnedStaging::acquire(int device, size_t size) {
  std::vector<Block>& pool = blocks_[{device, size}];
  for (size_t i = 0; i < pool.size(); ++i) {
    const cudaError_t status = cudaEventQuery(pool[i].done);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();  // a status, not an error
      continue;
    }
    PW_CUDA_CHECK(status);
    Block block = pool[i];
    pool[i] = pool.back();
    pool.pop_back();
    return block;
  }
  Block block;
  PW_CUDA_CHECK(cudaMallocHost(&block.ptr, size));
  if (const cudaError_t status = cudaEventCreateWithFlags(&block.done, cudaEventDisableTiming);
      status != cudaSuccess) {
    PW_CUDA_REPORT(cudaFreeHost(block.ptr));
    check(status, "cudaEventCreateWithFlags(&block.done, cudaEventDisableTiming)", __FILE__,
          __LINE__);
  }
  ++made_;
  return block;
}

void PinnedStaging::copy_to_device(void* dst, const void* src, size_t bytes, int device,
                                   cudaStream_t stream) {
  DeviceGuard guard(device);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  PW_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    // A graph would copy from the staging block at every replay, long after it is reused.
    throw std::logic_error("a copy of " + std::to_string(bytes) + " bytes from host memory to "
                           "cuda:" + std::to_string(device) + " inside a graph capture: a "
                           "replay would copy stale bytes (make the tensor on the device once, "
                           "before the captured step; Note [A step as one graph], "
                           "pipeline/step_graph.h)");
  }
  if (bytes > kMaxStagedBytes) {  // a one-off bulk copy: the driver's own staging
    PW_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    return;
  }
  const size_t size = block_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  Block block = acquire(device, size);
  std::vector<Block>& pool = blocks_[{device, size}];
  try {
    std::memcpy(block.ptr, src, bytes);
    PW_CUDA_CHECK(cudaMemcpyAsync(dst, block.ptr, bytes, cudaMemcpyHostToDevice, stream));
    PW_CUDA_CHECK(cudaEventRecord(block.done, stream));
  } catch (...) {
    // The block may still be read by a copy that was queued: wait before handing it out.
    PW_CUDA_REPORT(cudaStreamSynchronize(stream));
    pool.push_back(block);
    throw;
  }
  pool.push_back(block);
}

PinnedStaging& pinned_staging() {
  static PinnedStaging* staging = new PinnedStaging();  // never destroyed: outlives streams
  return *staging;
}

}  // namespace pipewright::cuda
