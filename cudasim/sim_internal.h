// The seam between cudasim's kernel executor (executor.h, launch.h, device.h) and its host
// runtime (the CUDA runtime / cuBLAS C functions, streams, memory, race detector).
//
// A kernel launch under --config=cudasim goes:
//   PW_LAUNCH(kernel, grid, block, smem, stream)(args...)          cuda_kernels/launch.cuh
//     -> cudasim::Launch::operator()                               launch.h (host thread)
//          checks the configuration (set_last_error on a bad one, nothing queued),
//          lists the pointer arguments as Accesses,
//     -> enqueue_kernel(stream, site, accesses, work)              runtime (host thread)
//          resolves the stream, checks the pointers, records the accesses with the race
//          detector (vector clocks at enqueue time), queues `work` on the stream
//     -> work() on the stream's own thread                         executor.cc
//          runs every block's threads as fibers; a KernelFault (divergent barrier, bad
//          shuffle mask, ...) becomes the device's sticky error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudasim {

/// One memory range a stream operation reads or writes. bytes == kToEnd: from ptr to the end of
/// the device allocation that contains ptr (a kernel's pointer argument: its extent is unknown).
struct Access {
  static constexpr size_t kToEnd = static_cast<size_t>(-1);
  const void* ptr;
  size_t bytes;
  bool write;
  int arg = -1;  // the kernel argument index, for messages (-1: not a kernel argument)
};

/// Where an operation was issued: what it is ("kernel reduce_rows_kernel<T> <<<(4,1,1),(256,1,1)>>>",
/// "cudaMemcpyAsync DeviceToHost 128 B", "cublasSgemm m=3 n=4 k=5") and the source location
/// when known (kernel launches: the PW_LAUNCH site). The runtime adds a host backtrace.
struct Site {
  std::string what;
  const char* file = nullptr;
  int line = 0;
};

/// Thrown by a kernel thread (or the executor) for behaviour that is undefined on a GPU. The
/// runtime turns it into the device's sticky error (cudaErrorLaunchFailure) whose text,
/// cudaGetErrorString's, includes what().
class KernelFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Queues `work` on `stream` (nullptr or cudaStreamLegacy: the legacy default stream of the
/// calling thread's current device) after checking `accesses` (device memory of the stream's
/// device, or of a peer whose access was enabled; live; within the allocation) and recording
/// them with the race detector. Returns cudaSuccess, or the error (also set as the thread's
/// last error): an invalid stream, a sticky error of the device, or a race
/// (see cudasim.h: PIPEWRIGHT_CUDASIM_RACES).
cudaError_t enqueue_kernel(cudaStream_t stream, const Site& site, std::vector<Access> accesses,
                           std::function<void()> work);

/// True when `p` points into a live device allocation (of any simulated device). Used to find
/// pointers inside a kernel's struct arguments.
bool is_device_memory(const void* p);

/// Sets the calling thread's last error (what cudaGetLastError returns and clears) with a
/// detail text that cudaGetErrorString(error) appends; returns `error`.
cudaError_t set_last_error(cudaError_t error, const std::string& detail);

/// Launch limits of the simulated devices (those of an sm_90 GPU).
inline constexpr unsigned kMaxThreadsPerBlock = 1024;
inline constexpr unsigned kMaxBlockDimZ = 64;
inline constexpr unsigned kMaxGridDimX = 2147483647u;
inline constexpr unsigned kMaxGridDimYZ = 65535;
inline constexpr size_t kMaxDynamicSharedBytes = 48 * 1024;

}  // namespace cudasim
