#include "cuda_kernels/index_check.h"

#include <utility>

#include "cuda_kernels/check.h"
#include "cuda_kernels/device_guard.h"
#include "tensor/deferred_check.h"

namespace pipewright::cuda {

IndexCheck::IndexCheck(Device device, cudaStream_t stream)
    : flag_(Tensor::empty({1}, {DType::kInt64, device})) {
  DeviceGuard guard(device);
  PW_CUDA_CHECK(cudaMemsetAsync(flag_.raw_data(), 0xff, sizeof(int64_t), stream));
}

unsigned long long* IndexCheck::slot() const {
  return static_cast<unsigned long long*>(flag_.raw_data());
}

void IndexCheck::defer(std::function<std::exception_ptr(int64_t position)> make_error) {
  defer_check({flag_, std::move(make_error)});
}

int64_t IndexCheck::read(const Tensor& values, int64_t position) {
  return values.reshape({-1}).slice(position, position + 1).to_vector<int64_t>()[0];
}

}  // namespace pipewright::cuda
