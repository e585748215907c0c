// StageMemory: what every kind of action of one stage does to its device's allocated bytes,
// measured to the byte by running the stage's cells as a step runs them (probe_stage), or
// estimated from a layer profile (estimate_stage, Note [Additive stage costs] in
// stage_estimate.cc). memory_replay.h turns these into each device's peak for a schedule.
//
// Note [Probing a stage]
// The probe runs two micro-batches through the layers [first, last) on the calling thread,
// with the same stage function (stage_fn.h) and the same Cell the runtime's workers use, and
// reads the device's Allocator around each action:
//
//   arrive(x0) F0 arrive(x1) F1 | arrive(g0) B0 arrive(g1) B1       recorded cells
//   arrive(x0) Fc0 arrive(x1) Fc1 | R0 arrive(g0) B0 R1 ...          checkpointed cells
//   arrive(x0) F0 arrive(x1) F1 | arrive(g0) I0 W0 arrive(g1) I1 W1  split backward
//
// "arrive" allocates a message as the sender's copy would (the stage's input activation, or
// the gradient of its output); what an action sends is dropped at its end, as the transport's
// copy to another device leaves nothing behind. The first F of each series and the first B
// (or W) are measured apart: a step's first forward of a stage allocates what lasts until
// the step ends (deferred BatchNorm's sums), its first backward creates every .grad (a step
// starts after zero_grad()). Stage 0 copies its micro-batch to the device inside F; the last
// stage computes the loss inside F, keeps the loss value until the step ends and makes its
// gradient seed in F, through the same StepLoss (step_loss.h) a train_step installs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/precision.h"
#include "nn/sequential.h"
#include "pipeline/planner/stage_memory.h"
#include "pipeline/step.h"
#include "tensor/tensor.h"

namespace pipewright::pipeline {

struct ProbeOptions {
  /// Deferred BatchNorm as the Pipe will run it (PipeOptions::deferred_batch_norm).
  bool deferred_batch_norm = false;
  /// The precision policy the Pipe will run (PipeOptions::precision): the cells run under it
  /// with the stage's working copies, made by the first cell of a series, and the messages
  /// travel in 16 bits (Note [16-bit messages], stage_fn.cc), as in a step.
  autograd::Precision precision = autograd::Precision::kFloat32;
};

/// Measures the stage made of `model`'s layers [first, last) for micro-batches of `rows` rows
/// of the sample (`input` [N, ...] on any device, `target` [N, ...]), on the device of the
/// model's parameters (Note [Probing a stage]); the layers before `first` run without grad
/// to make its input. Leaves the model as it was (Note [Profiling leaves the module as it
/// was], balance.h). A skip crossing one of the stage's ends is a portal (Note [Cuts inside a
/// skip], cuts.h): popped here, it arrives with the input message (and its gradient leaves
/// with the input gradient); stashed here for a later stage, it leaves with the output (and
/// its gradient arrives with the output gradient). Throws std::invalid_argument for an empty
/// or out-of-range [first, last), rows outside [1, N], or a skip stashed before the stage and
/// popped after it (naming it); and whatever the layers and loss_fn throw.
StageMemory probe_stage(nn::Sequential& model, int first, int last, int64_t rows,
                        const Tensor& input, const Tensor& target, const LossFn& loss_fn,
                        const ProbeOptions& options = {});

}  // namespace pipewright::pipeline
