#include "cuda_kernels/device_guard.h"

#include "cuda_kernels/check.h"

namespace pipewright::cuda {

DeviceGuard::DeviceGuard(int index) {
  int current = 0;
  PW_CUDA_CHECK(cudaGetDevice(&current));
  if (current != index) {
    PW_CUDA_CHECK(cudaSetDevice(index));
    previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  // A destructor must not throw; restoring a device that was valid a moment ago cannot fail
  // short of a dead context, which is then reported here and by the next checked call.
  if (previous_ >= 0) PW_CUDA_REPORT(cudaSetDevice(previous_));
}

}  // namespace pipewright::cuda
