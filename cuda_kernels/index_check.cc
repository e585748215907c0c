#include "cuda_kernels/index_check.h"

#include "cuda_kernels/check.h"
#include "cuda_kernels/device_guard.h"

namespace pipewright::cuda {

IndexCheck::IndexCheck(Device device, cudaStream_t stream)
    : device_(device), stream_(stream), slot_(device, 1, stream) {
  DeviceGuard guard(device_);
  PW_CUDA_CHECK(cudaMemsetAsync(slot_.get(), 0xff, sizeof(unsigned long long), stream_));
}

int64_t IndexCheck::first_bad() const {
  DeviceGuard guard(device_);
  unsigned long long host = 0;
  PW_CUDA_CHECK(cudaMemcpyAsync(&host, slot_.get(), sizeof host, cudaMemcpyDeviceToHost, stream_));
  PW_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return host == ~0ull ? -1 : static_cast<int64_t>(host);
}

int64_t IndexCheck::read(const int64_t* values, int64_t position) const {
  DeviceGuard guard(device_);
  int64_t host = 0;
  PW_CUDA_CHECK(cudaMemcpyAsync(&host, values + position, sizeof host, cudaMemcpyDeviceToHost,
                                stream_));
  PW_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return host;
}

}  // namespace pipewright::cuda
