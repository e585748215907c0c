// The CUDA DeviceBackend (tensor/stream.h): streams, events, copies and device counting.
//
// Handles are the runtime's own: a Stream's handle() is a cudaStream_t, an Event's a
// cudaEvent_t. Registered for DeviceType::kCUDA at start-up by cuda_kernels/register.cc, so
// code above tensor/ uses Stream, Event and Tensor::to() and never names CUDA.
//
// Note [Blocking streams]
// Streams made by create_stream() are *blocking* streams (cudaStreamDefault): the legacy
// default stream (handle nullptr, every thread's current stream until a StreamGuard says
// otherwise) waits for them and they wait for it. So a tensor written on the default stream is
// safe to read on a worker's stream without an Event. Two created streams still run
// concurrently with each other; issuing work on the default stream while they run serialises
// them, which is why pipeline workers use created streams for everything.
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
