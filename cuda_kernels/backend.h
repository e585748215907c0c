// The CUDA DeviceBackend (tensor/stream.h): streams, events, copies and device counting.
//
// Handles are the runtime's own: a Stream's handle() is a cudaStream_t, an Event's a
// cudaEvent_t. Registered for DeviceType::kCUDA at start-up by cuda_kernels/register.cc, so
// code above tensor/ uses Stream, Event and Tensor::to() and never names CUDA.
//
// Note [Non-blocking streams]
// Streams made by create_stream() are *non-blocking* (cudaStreamNonBlocking): they never wait
// for the legacy default stream (handle nullptr, every thread's current stream until a
// StreamGuard says otherwise) nor it for them. So work on one stream is ordered after work on
// another only by an Event: a tensor written on the default stream is read on a worker's
// stream after the worker waited for an event recorded after the write (the pipeline's entry
// fence, Note [The caller's streams] in pipeline/runtime.cc), and the caller reads the
// workers' results after its stream waited for theirs (the exit fence). With blocking streams
// every kernel the caller issued on the default stream during a step (the optimizer, a loss)
// would have waited for every worker, and the workers for it.
#pragma once

#include "tensor/stream.h"

namespace pipewright::cuda {

/// The process-wide CUDA backend (its only state: the device count, cached, and a pool of idle
/// streams, see Note [Pooled streams] in backend.cc).
DeviceBackend& cuda_backend();

/// Number of CUDA devices: 0 when there is no GPU or no (new enough) driver ("CUDA driver
/// version is insufficient for CUDA runtime version", "no CUDA-capable device is detected");
/// any other failure of cudaGetDeviceCount throws CudaError. Computed once, then cached.
int cuda_device_count();

}  // namespace pipewright::cuda
