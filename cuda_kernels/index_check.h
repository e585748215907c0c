// IndexCheck: how a kernel reports an out-of-range index without the host waiting for it.
//
// A kernel cannot throw. Kernels that read indices (cross-entropy targets, index_select rows)
// instead record the *position* of the first bad index in a one-element int64 device tensor
// with atomicMin (all ones, -1, means none), and the host registers that flag as a deferred
// check (Note [Deferred checks], tensor/deferred_check.h): the exception, std::out_of_range
// naming the index, its position and the bound like the CPU kernel's, is thrown when the
// thread next reads from the device, or at the end of the pipeline step that ran the kernel.
//
//   IndexCheck check(out.device(), stream);           // flag = none, cleared on the stream
//   kernel<<<..., stream>>>(..., check.slot());       // bad index at i: atomicMin(slot, i)
//   check.defer([=](int64_t i) { return std::make_exception_ptr(...); });   // no wait
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <exception>
#include <functional>

#include "tensor/tensor.h"

namespace pipewright::cuda {

class IndexCheck {
 public:
  /// An int64 [1] flag on `device` from its caching allocator, set to "none" on `stream`.
  IndexCheck(Device device, cudaStream_t stream);
  IndexCheck(const IndexCheck&) = delete;
  IndexCheck& operator=(const IndexCheck&) = delete;

  /// The device word kernels atomicMin() a bad position into.
  unsigned long long* slot() const;
  /// Registers the flag as a deferred check whose exception, for a bad position, is
  /// make_error(position). Call once, after the kernel is queued.
  void defer(std::function<std::exception_ptr(int64_t position)> make_error);

  /// The int64 at `position` of `values` (a device tensor), read now: for error messages.
  static int64_t read(const Tensor& values, int64_t position);

 private:
  Tensor flag_;
};

}  // namespace pipewright::cuda
