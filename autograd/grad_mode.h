// Thread-local modes read by differentiable functions and modules.
//
// GradMode: when disabled (NoGradGuard), ops record nothing and outputs do not require grad
// (torch.no_grad). Checkpoint flags: the pipeline sets them around a checkpointed cell's
// first forward (is_checkpointing) and its recompute (is_recomputing), so that a module can
// behave the same in both (Dropout replays its mask) and commit side effects once
// (BatchNorm updates running statistics only when !is_recomputing()). Semantics of
// torchgpipe.is_checkpointing() / is_recomputing().
// All flags are per thread: pipeline workers run different cells at the same time.
#pragma once

namespace pipewright::autograd {

bool grad_mode_enabled();
void set_grad_mode_enabled(bool enabled);

/// Disables gradient recording on this thread for its lifetime.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

/// True while this thread runs the first forward of a checkpointed cell.
bool is_checkpointing();
/// True while this thread recomputes a checkpointed cell's forward before its backward.
bool is_recomputing();

/// Sets is_checkpointing() / is_recomputing() on this thread for its lifetime.
class CheckpointModeGuard {
 public:
  CheckpointModeGuard(bool checkpointing, bool recomputing);
  ~CheckpointModeGuard();
  CheckpointModeGuard(const CheckpointModeGuard&) = delete;
  CheckpointModeGuard& operator=(const CheckpointModeGuard&) = delete;

 private:
  bool previous_checkpointing_;
  bool previous_recomputing_;
};

}  // namespace pipewright::autograd
