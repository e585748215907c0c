// Calls fake_cuda's functions a known number of times, as a program linked against libcudart
// would, for tests/tools/gpu_check_test.sh to run under //tools/gpu/apicount:libpw_apicount.so.
// It also defines cudasim::api_counts() (exported: -rdynamic), as a cudasim build does, so the
// interposer's "cudasim" lines are exercised too. Exit status 0 when every call succeeded.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

extern "C" cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                          size_t shared_bytes, cudaStream_t stream);
extern "C" int fake_cuda_calls();

namespace cudasim {
std::map<std::string, int64_t> api_counts() {
  return {{"kernel launch", 3}, {"cudaMemcpyAsync HostToDevice", 2}};
}
}  // namespace cudasim

int main() {
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(0x5151);
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "apicount_driver: %s failed\n", what);
      ++failures;
    }
  };
  int arg = 0;
  void* args[] = {&arg};
  for (int i = 0; i < 3; ++i) {
    check(__cudaLaunchKernel(reinterpret_cast<cudaKernel_t>(0x4b), dim3(7, 3), dim3(256, 2),
                             args, 4224, stream) == cudaSuccess,
          "__cudaLaunchKernel");
  }
  check(cudaLaunchKernel(reinterpret_cast<const void*>(&main), dim3(5), dim3(32), args, 0,
                         stream) == cudaSuccess,
        "cudaLaunchKernel");
  char host[1024], device[1024];
  for (int i = 0; i < 2; ++i) {
    check(cudaMemcpyAsync(device, host, sizeof host, cudaMemcpyHostToDevice, stream) ==
              cudaSuccess,
          "cudaMemcpyAsync HostToDevice");
  }
  check(cudaMemcpyAsync(host, device, sizeof host, cudaMemcpyDeviceToHost, stream) == cudaSuccess,
        "cudaMemcpyAsync DeviceToHost");
  check(cudaMemcpy(host, device, 8, cudaMemcpyDefault) == cudaSuccess, "cudaMemcpy Default");
  cudaEvent_t event = reinterpret_cast<cudaEvent_t>(0xe7);
  for (int i = 0; i < 4; ++i) {
    check(cudaEventRecord(event, stream) == cudaSuccess, "cudaEventRecord");
  }
  check(cudaStreamWaitEvent(stream, event, 0) == cudaSuccess, "cudaStreamWaitEvent");
  check(cudaStreamSynchronize(stream) == cudaSuccess, "cudaStreamSynchronize");
  void* p = nullptr;
  check(cudaMalloc(&p, 512) == cudaSuccess && p == reinterpret_cast<void*>(0x1000), "cudaMalloc");
  const float alpha = 1.5f, beta = 0.0f;
  float a[8], b[12], c[6];
  for (int i = 0; i < 5; ++i) {
    check(cublasSgemm(reinterpret_cast<cublasHandle_t>(0x6b), CUBLAS_OP_T, CUBLAS_OP_N, 2, 3, 4,
                      &alpha, a, 4, b, 4, &beta, c, 2) == CUBLAS_STATUS_SUCCESS,
          "cublasSgemm");
  }
  const float two = 2.0f, one = 1.0f;
  uint16_t a16[12], b16[8];
  for (int i = 0; i < 3; ++i) {
    check(cublasGemmEx(reinterpret_cast<cublasHandle_t>(0x6b), CUBLAS_OP_N, CUBLAS_OP_T, 3, 2, 4,
                       &two, a16, CUDA_R_16BF, 3, b16, CUDA_R_16BF, 2, &one, c, CUDA_R_32F, 3,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
          "cublasGemmEx");
  }
  std::printf("apicount_driver: %d calls reached the fake library, %d failed\n", fake_cuda_calls(),
              failures);
  return failures == 0 ? 0 : 1;
}
