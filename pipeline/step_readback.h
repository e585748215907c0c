// The one read of a step's values from the devices: its losses and its deferred checks.
#pragma once

#include "pipeline/step.h"

namespace pipewright::pipeline {

/// On the caller's thread, after a step's workers are done and the exit fence waited for
/// them (Note [The caller's streams], runtime.cc): fills step.losses from step.loss_values and
/// reads every deferred check the workers collected, with one copy to the host per device
/// (Note [One read per step]). A set flag, then a non-finite training loss, is recorded with
/// Step::fail_at naming the action that made it (the kernel's own exception; std::domain_error
/// for the loss); the caller rethrows step.error(). Throws what the copies throw.
void read_step_values(Step& step);

}  // namespace pipewright::pipeline
