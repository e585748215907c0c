// PipeTestAccess: the tests' seam into a Pipe, kept out of its public interface (Pipe names
// it a friend). Programs have no use for it.
#pragma once

#include <utility>

#include "pipeline/pipe.h"
#include "pipeline/runtime.h"

namespace pipewright::pipeline {

class PipeTestAccess {
 public:
  /// Fault injection (tests/pipeline/pipe_fault_test.cc): Runtime::set_fault_hook on the
  /// Pipe's runtime. Set between calls only; an empty function removes it.
  static void set_fault_hook(Pipe& pipe, Runtime::FaultHook hook) {
    pipe.runtime().set_fault_hook(std::move(hook));
  }
};

}  // namespace pipewright::pipeline
