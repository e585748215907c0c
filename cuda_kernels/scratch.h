// Scratch<T>: temporary device memory for one kernel call, from the device's caching allocator.
//
//   Scratch<double> stats(out.device(), 2 * channels, stream);   // freed at scope exit
//   kernel<<<..., stream>>>(stats.get(), ...);
//
// Freeing it right after queuing the kernels is safe: the caching allocator hands the block
// to a later request on the same stream at once (that request's work queues behind ours), and
// to another stream only after our work is done (Note [Stream-aware reuse]).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tensor/allocator.h"

namespace pipewright::cuda {

template <class T>
class Scratch {
 public:
  /// `count` elements of T on CUDA `device`, to be used on `stream`. Throws CudaError when the
  /// device is out of memory.
  Scratch(Device device, int64_t count, cudaStream_t stream)
      : allocator_(&allocator_for(device)),
        bytes_(static_cast<size_t>(count) * sizeof(T)),
        ptr_(static_cast<T*>(allocator_->allocate(bytes_, stream))) {}
  ~Scratch() { allocator_->deallocate(ptr_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  T* get() const { return ptr_; }

 private:
  Allocator* allocator_;
  size_t bytes_;
  T* ptr_;
};

}  // namespace pipewright::cuda
