// cudasim: the CUDA runtime and cuBLAS subset pipewright calls, simulated on the CPU.
//
// Linked instead of libcudart/libcublas under --config=cudasim. The C functions keep the
// signatures of the real CUDA 13 headers; this header adds the C++ knobs tests and users need.
//
// Environment (read once, at the first CUDA call):
//   PIPEWRIGHT_CUDASIM_DEVICES=N      simulated devices (default 2; 0: cudaGetDeviceCount
//                                     returns cudaErrorNoDevice)
//   PIPEWRIGHT_CUDASIM_MEMORY_MB=M    memory per device in MiB (default 4096); cudaMalloc past
//                                     it returns cudaErrorMemoryAllocation
//   PIPEWRIGHT_CUDASIM_CHAOS=<seed>   nonzero: each stream sleeps a random 0-2 ms (seeded by
//                                     seed and stream) before each operation, so code that
//                                     reads results without synchronising fails visibly
//   PIPEWRIGHT_CUDASIM_RACES=error    (default) a stream operation whose memory access races
//                                     with an earlier one (race.h, Note [Race detection]) is
//                                     refused: the call returns cudaErrorIllegalState (not
//                                     sticky; cublas calls: CUBLAS_STATUS_EXECUTION_FAILED)
//                                     and cudaGetErrorString/cublasGetStatusString append the
//                                     report. =report: print it to stderr and run the op.
//                                     Either way the report goes to stderr and to
//                                     take_race_reports().
//
// Pinned host memory (cudaMallocHost) is what a GPU has it be: a copy from it is read when the
// stream runs the copy, not when it is queued (a copy from pageable memory is read at the call,
// as CUDA's staging does), so reusing a pinned block before its copy ran is visible.
//
// Semantics that differ from a GPU on purpose: every stream runs on its own host thread;
// kernels with a bad pointer argument are refused at launch (the launch returns
// cudaErrorIllegalAddress, which is sticky) rather than faulting later; cudaStreamDestroy waits
// for the stream's queued work; cudaEventQuery/cudaStreamQuery returning cudaErrorNotReady do
// not set the last error (as on CUDA: NotReady is a status, not an error).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cudasim {

enum class RacePolicy { kError, kReport };

/// Sets how races are handled (overrides PIPEWRIGHT_CUDASIM_RACES); returns the previous one.
RacePolicy set_race_policy(RacePolicy policy);

/// Returns every race report since the last call (process-wide, in detection order), and
/// clears the list.
std::vector<std::string> take_race_reports();

/// Tests only: waits until every queued operation of `device` has finished (they are skipped
/// when the device is sticky), then clears its sticky error and the calling thread's last
/// error. Does nothing for an invalid device.
void reset_device(int device);

/// The number of simulated devices (PIPEWRIGHT_CUDASIM_DEVICES).
int simulated_device_count();

/// How many times each CUDA runtime and cuBLAS entry point was called since the last
/// reset_api_counts(), process-wide, by name: "cudaStreamSynchronize", "cudaEventRecord",
/// "cudaMemcpyAsync DeviceToHost" (copies by direction), "kernel launch", "cublasSgemm", ...
/// Calls refused for their arguments count too. For tests that count what a training step
/// asks of the GPU (deterministic, unlike its time).
std::map<std::string, int64_t> api_counts();
void reset_api_counts();

}  // namespace cudasim
