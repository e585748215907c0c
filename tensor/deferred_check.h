// Deferred checks: how a device kernel reports bad input without the host waiting for it.
//
// Note [Deferred checks]
// A kernel cannot throw. One that meets a bad index (cross-entropy's target, index_select's
// row) records the position of the first one in a one-element int64 tensor on its device, the
// *flag* (-1: none), and its host code registers that flag here with the exception it stands
// for, instead of waiting for the kernel to read the flag back (which stalls the host and so
// the device's queue: twice per micro-batch for a cross-entropy and its backward). The flag is
// read where the thread waits for the device anyway:
//   - Tensor::item(), to(cpu), to_vector(), Stream::synchronize() and Event::synchronize()
//     end with raise_deferred_checks(): eager code sees the op's own exception (naming the
//     index) at its next read, much as CUDA's device-side asserts surface at the next sync;
//   - a pipeline step takes its workers' checks after each action and reads them together
//     with the step's losses in one copy at the step's end (Note [One read per step],
//     pipeline/step_readback.cc), so the failure still names the action that ran the kernel.
// CPU kernels throw at once and register nothing. The list is per thread: checks registered by
// one thread are raised by that thread (or handed on by the pipeline's runtime).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <vector>

#include "tensor/tensor.h"

namespace pipewright {

struct DeferredCheck {
  /// int64 [1] on the device that ran the kernel: -1, or the position the kernel found bad.
  Tensor flag;
  /// The exception for a bad position (it may read the device, e.g. the bad index's value).
  std::function<std::exception_ptr(int64_t position)> error;
};

/// Registers a check on the calling thread's list.
void defer_check(DeferredCheck check);

/// The calling thread's registered checks, oldest first; the list is left empty.
std::vector<DeferredCheck> take_deferred_checks();

/// Reads the flag of each of `checks` (one copy to the host per device: the flags of a device
/// are gathered there first) and rethrows the exception of the first whose flag is set.
/// Checks whose kernels are still queued are waited for.
void raise_failed(const std::vector<DeferredCheck>& checks);

/// raise_failed(take_deferred_checks()): what a call that waited for a device runs last.
/// Cheap when nothing is registered (the CPU, and code that reads no indices on a GPU).
void raise_deferred_checks();

}  // namespace pipewright
