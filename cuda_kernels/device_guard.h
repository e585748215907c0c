// DeviceGuard and current_stream(): which GPU and which stream a CUDA call goes to;
// multiprocessor_count(): how many SMs it has.
//
// The CUDA runtime has one "current device" per host thread; every allocation, stream, event
// and kernel launch goes to it. A kernel of cuda:1 must therefore run with device 1 current:
//
//   DeviceGuard guard(out.device());            // cudaSetDevice(1), restored at scope exit
//   kernel<<<grid, block, 0, current_stream(out.device())>>>(...);
//
// current_stream() is the calling thread's current pipewright Stream of that device (set by a
// StreamGuard, see tensor/stream.h), as a cudaStream_t: nullptr is the legacy default stream.
#pragma once

#include <cuda_runtime_api.h>

#include "tensor/device.h"
#include "tensor/stream.h"

namespace pipewright::cuda {

/// Makes CUDA device `index` current for the guard's lifetime, then restores the previous one.
/// Cheap when it is already current (no cudaSetDevice call). Throws CudaError for a bad index.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  explicit DeviceGuard(Device device) : DeviceGuard(device.index) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

/// The number of streaming multiprocessors of CUDA device `index` (132 on an H100 SXM or H200
/// and under cudasim), asked once per device and remembered. Kernels size their grids by it.
/// Throws CudaError for a bad index.
int multiprocessor_count(int index);

/// The calling thread's current stream on `device` (a CUDA device), as a cudaStream_t.
inline cudaStream_t current_stream(Device device) {
  return static_cast<cudaStream_t>(Stream::current(device).handle());
}

}  // namespace pipewright::cuda
