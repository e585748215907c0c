// IndexCheck: how a kernel reports an out-of-range index so the host can throw.
//
// A kernel cannot throw. Kernels that read indices (cross-entropy targets, index_select rows)
// instead record the *position* of the first bad index in one device word with atomicMin;
// after the launch the host reads that word back (one stream synchronization) and throws
// std::out_of_range naming the index, its position and the bound, like the CPU kernel:
//
//   IndexCheck check(out.device(), stream);           // slot = "none" (all ones)
//   kernel<<<..., stream>>>(..., check.slot());       // bad index at i: atomicMin(slot, i)
//   if (int64_t i = check.first_bad(); i >= 0) throw ...;   // waits for the stream
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda_kernels/scratch.h"
#include "tensor/device.h"

namespace pipewright::cuda {

class IndexCheck {
 public:
  /// Takes 8 bytes of `device` memory from its caching allocator, cleared on `stream`.
  IndexCheck(Device device, cudaStream_t stream);
  IndexCheck(const IndexCheck&) = delete;
  IndexCheck& operator=(const IndexCheck&) = delete;

  /// The device word kernels atomicMin() a bad position into.
  unsigned long long* slot() const { return slot_.get(); }
  /// Waits for the stream; the lowest bad position recorded, or -1 when there was none.
  int64_t first_bad() const;
  /// The int64 at `position` of the device array `values` (to name the bad index).
  int64_t read(const int64_t* values, int64_t position) const;

 private:
  Device device_;
  cudaStream_t stream_;
  Scratch<unsigned long long> slot_;
};

}  // namespace pipewright::cuda
