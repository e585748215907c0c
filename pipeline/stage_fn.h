// What a cell runs: one stage's layers with their skip connections and, on the last stage of
// train_step, the loss. The runtime's workers call it inside Cell::forward / recompute; the
// planner's stage probe (pipeline/planner/stage_probe.h) calls the same function on one
// thread, so what it measures is what a step allocates.
#pragma once

#include <functional>

#include "autograd/precision.h"
#include "nn/arguments.h"
#include "nn/sequential.h"
#include "pipeline/skip_layout.h"
#include "pipeline/step_result.h"
#include "tensor/device.h"

namespace pipewright::pipeline {

/// The loss a last stage computes inside its cell (train_step / eval_step).
struct StageLoss {
  const TupleLossFn* loss_fn = nullptr;  // loss_fn(outputs, targets) -> one element
  const nn::Tensors* targets = nullptr;  // the micro-batch's targets, on the stage's device
  nn::Tensors* kept_outputs = nullptr;   // non-null: receives the outputs, detached
};

/// The function a cell of stage `s` runs for micro-batch `j`: `module` on the regular inputs
/// (the tensors popped from portals are the last skips.portals_in(s).size() inputs, handed to
/// the layers that pop them: Note [Portals], stage_skips.h), under `arguments`; every output
/// copied back to `device` when the module left it elsewhere (Note [A stage's output on
/// another device], stage_fn.cc); with `loss` set, the outputs replaced by the one-element
/// loss; then the tensors stashed for later stages (skips.portals_out(s)). `module`, `skips`,
/// `arguments` and what `loss` points to must outlive the function. The returned function
/// throws std::invalid_argument when the loss has other than one element, and whatever the
/// layers, the skips (std::logic_error) and loss_fn throw.
std::function<nn::Tensors(const nn::Tensors&)> stage_function(nn::Sequential& module,
                                                              Device device,
                                                              const SkipLayout& skips, int s,
                                                              int j, const nn::Arguments& arguments,
                                                              StageLoss loss);

/// `run` under the precision policy `precision`, with `copies` as the stage's working copies
/// (made by the first call that needs them and reused by the later ones: a step's first cell
/// of the stage makes them, its other cells and recomputes reuse them; Note [The precision
/// policy], autograd/precision.h). `copies` must outlive the function. `run` itself under
/// kFloat32.
std::function<nn::Tensors(const nn::Tensors&)> under_precision(
    std::function<nn::Tensors(const nn::Tensors&)> run, autograd::Precision precision,
    autograd::WorkingCopies* copies);

/// A message as it travels under `precision` (Note [16-bit messages], stage_fn.cc): the
/// float32 tensors of a stage's outputs, or of its input gradients, in the 16-bit dtype;
/// everything as it is under kFloat32.
nn::Tensors narrow_message(nn::Tensors tensors, autograd::Precision precision);
/// The receiving side: the 16-bit tensors widened back to float32, exactly.
nn::Tensors widen_message(nn::Tensors tensors, autograd::Precision precision);
/// The bytes narrow_message(tensors, precision) would hold, without making it.
int64_t message_bytes(const nn::Tensors& tensors, autograd::Precision precision);

}  // namespace pipewright::pipeline
