// A process may exit while a kernel still runs, as a CUDA program may: under AddressSanitizer
// the exit's leak check must find nothing. While a kernel's CUDA threads run on fibers,
// LeakSanitizer scans the current fiber's stack, not the stream worker's own; the op the worker
// ran used to live on that stack, so its description was reported as a 140-byte leak
// (cudasim/streams.h, Stream::running_). Without AddressSanitizer this test checks only that
// the exit does not wait for, or crash in, the running kernel; run it with
// `--config=cudasim --config=asan` to check the leak.
#include "cudasim/device.h"  // first, as the cuda_library rule does for .cu files

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "cudasim/executor.h"
#include "cudasim/sim_internal.h"

namespace {

std::atomic<int> threads_past_barrier{0};

/// Every thread reaches a barrier (so each is on a fiber of its own); the first released never
/// returns (the block's fibers take turns, so the others stay at the barrier).
void kernel_body(const void*) {
  __syncthreads();
  threads_past_barrier.fetch_add(1);
  for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

int main() {
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) {
    std::fprintf(stderr, "cudaStreamCreate failed\n");
    return 1;
  }
  static const cudasim::KernelInfo info{"never_ending_kernel", __FILE__, __LINE__};
  // Longer than std::string's in-place buffer, so the op's description is on the heap.
  const cudasim::Site site{std::string(info.name) + " launched by " + __FILE__, __FILE__,
                           __LINE__};
  const cudaError_t launched = cudasim::enqueue_kernel(stream, site, {}, [] {
    cudasim::run_grid(info, dim3(1), dim3(64), kernel_body, nullptr);
  });
  if (launched != cudaSuccess) {
    std::fprintf(stderr, "enqueue_kernel failed: %s\n", cudaGetErrorString(launched));
    return 1;
  }
  while (threads_past_barrier.load() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::printf("exiting while the kernel runs\n");
  return 0;  // the leak check (under ASan) runs now, with the kernel's threads on fibers
}
