// What a profile of a module changes and puts back (Note [Profiling leaves the module as it
// was], balance.h), shared by balance_by_time / balance_by_size and the planner's profile
// and stage probe (pipeline/planner/).
#pragma once

#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "nn/module.h"
#include "tensor/generator.h"
#include "tensor/tensor.h"

namespace pipewright::nn {
class BatchNorm1d;
}

namespace pipewright::pipeline {

/// Records, on construction, everything a profile may change in `module` and on the calling
/// thread, and puts it back on destruction (an exception thrown by a layer restores it too):
/// buffers (copied back in place), training flags (per module), every parameter's .grad
/// (the same handles; cleared while profiling, so a backward creates fresh ones as a step's
/// first would), deferred BatchNorm modes (profiled plain; accumulated sums untouched), grad
/// mode and checkpoint flags. While it lives, Dropout draws from a private copy of the
/// caller's generator, grad mode is on and the module is in training mode.
class ProfileStateGuard {
 public:
  explicit ProfileStateGuard(nn::Module& module);
  ~ProfileStateGuard();
  ProfileStateGuard(const ProfileStateGuard&) = delete;
  ProfileStateGuard& operator=(const ProfileStateGuard&) = delete;

 private:
  void record_modes(nn::Module& m);

  Generator generator_;  // a copy of the caller's state: realistic draws, caller's untouched
  GeneratorGuard generator_guard_;
  bool grad_mode_;
  autograd::CheckpointModeGuard checkpoint_flags_;
  std::vector<std::pair<Tensor, Tensor>> buffers_;  // (the live buffer, its saved copy)
  std::vector<std::pair<Tensor, Tensor>> grads_;    // (a parameter, its .grad before)
  std::vector<std::pair<nn::Module*, bool>> modes_;
  std::vector<nn::BatchNorm1d*> deferred_;
};

/// What a layer gets as input: `outputs` cut from their graph, requiring grad exactly when
/// they did (torchgpipe's detach between layers).
nn::Tensors detach_like(const nn::Tensors& outputs);

}  // namespace pipewright::pipeline
