// Thread-local grad mode and checkpoint flags (see grad_mode.h).
//
// Plain thread_local booleans: reading them is as cheap as reading a global, and threads never
// see each other's settings, so pipeline workers need no locks.
#include "autograd/grad_mode.h"

namespace pipewright::autograd {
namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_checkpointing = false;
thread_local bool t_recomputing = false;
}  // namespace

bool grad_mode_enabled() { return t_grad_enabled; }
void set_grad_mode_enabled(bool enabled) { t_grad_enabled = enabled; }

NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

bool is_checkpointing() { return t_checkpointing; }
bool is_recomputing() { return t_recomputing; }

CheckpointModeGuard::CheckpointModeGuard(bool checkpointing, bool recomputing)
    : previous_checkpointing_(t_checkpointing), previous_recomputing_(t_recomputing) {
  t_checkpointing = checkpointing;
  t_recomputing = recomputing;
}

CheckpointModeGuard::~CheckpointModeGuard() {
  t_checkpointing = previous_checkpointing_;
  t_recomputing = previous_recomputing_;
}

}  // namespace pipewright::autograd
