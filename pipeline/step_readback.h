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

/// The device half of read_step_values: per device, the losses and flags cast to float64 and
/// gathered into one tensor by kernels on the caller's current stream (no host wait, so a
/// graph capture may record it); the step's loss tensors are released. Throws what the
/// kernels throw.
GatheredValues gather_step_values(Step& step);

/// Adds `finding` (one float64 on a device: 0, or NaN when a gradient overflowed; Note [Loss
/// scaling without a host read], pipe_clip_grad.cc) to `gathered`, on the caller's current
/// stream, so the read that follows sets step.found_inf with no copy of its own.
void add_overflow_finding(GatheredValues& gathered, const Tensor& finding);

/// Moves every tensor of `gathered` to `device` and joins them into one (their values in
/// order), by copies and a kernel on the caller's current streams, so the host half reads the
/// step with one copy from `device` alone: a graph over devices ends with it (Note [A step
/// over devices], step_graph.h), its one read then ordered after the launch on that device's
/// stream. Nothing to do for values already on one device. Throws what the copies throw.
void gather_on(GatheredValues& gathered, Device device);

/// The host half: one copy to the host per device of `gathered` (made by gather_step_values
/// for this step, or by a replay of the graph that captured it), then as read_step_values.
void read_step_values(Step& step, const GatheredValues& gathered);

}  // namespace pipewright::pipeline
