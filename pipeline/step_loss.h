// StepLoss: the loss inside the pipeline. train_step and eval_step install one in their Step
// (Pipe::forward does not: its loss is the user's, outside the pipeline); the last stage's
// cells then end in loss_fn (stage_fn.h), and the runtime hands each micro-batch's loss
// here and starts that micro-batch's backward from the gradient it keeps (Note [Loss
// scaling], pipe_train_step.cc). The planner's stage probe (planner/stage_probe.h) drives
// one the same way on one thread, so what it measures is what a step allocates. Everything
// here but the fixed part is touched only by the last stage's worker while the step runs,
// and by the caller after it (step.h's ownership rule).
#pragma once

#include <cstdint>
#include <vector>

#include "nn/tensors.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/stage_fn.h"
#include "pipeline/step_result.h"

namespace pipewright::pipeline {

/// Where something of a step was made: the action (index `index` of `worker`'s list), so a
/// failure found when the step's values are read at its end names it.
struct ActionSite {
  int worker = -1, index = -1;
  Action action;
};

class StepLoss {
 public:
  /// `targets[j]`: micro-batch j's targets, on the last stage's device; `sizes[j]`: its rows.
  /// `keep_outputs`: also keep the last stage's outputs, detached (StepOptions::return_outputs).
  /// `loss_scale`: StepOptions::loss_scale, multiplying every gradient made();
  /// `loss_scale_tensor` (a one-element float64 on the last stage's device, or undefined):
  /// a scale read on the device, multiplying them too (the whole step's GradScaler, whose
  /// value a replayed graph reads anew every step).
  StepLoss(TupleLossFn loss_fn, std::vector<nn::Tensors> targets, std::vector<int64_t> sizes,
           LossReduction reduction, bool keep_outputs, double loss_scale = 1.0,
           Tensor loss_scale_tensor = Tensor());

  /// What the last stage's cell of micro-batch j computes after its layers; `outputs`
  /// receives the outputs when they are kept.
  StageLoss stage_loss(int j, nn::Tensors& outputs) const;
  /// Micro-batch j's loss, as the last stage's forward made it: kept on its device until the
  /// step's end (Note [One read per step]), and, `with_backward`, the gradient its backward
  /// starts from, scale(j) times the loss scale (Note [Loss scaling]).
  void made(int j, const Tensor& loss, bool with_backward);
  /// Remembers that `where` made micro-batch j's loss (after that action succeeded).
  void made_by(int j, const ActionSite& where) { sites_.at(static_cast<size_t>(j)) = where; }
  /// The gradient made() kept for micro-batch j, handed over once (not held to the step's end).
  Tensor take_grad(int j);
  /// d(mini-batch loss)/d(loss of micro-batch j): rows of j / rows of the mini-batch for
  /// kMean, 1 for kSum.
  double scale(int j) const;
  int num_microbatches() const { return static_cast<int>(sizes_.size()); }

  /// Micro-batch j's loss on its device (undefined once the step's values were read).
  Tensor& value(int j) { return values_.at(static_cast<size_t>(j)); }
  /// The action that made micro-batch j's loss.
  const ActionSite& site(int j) const { return sites_.at(static_cast<size_t>(j)); }

 private:
  TupleLossFn loss_fn_;
  std::vector<nn::Tensors> targets_;
  std::vector<int64_t> sizes_;
  int64_t batch_size_ = 0;
  double loss_scale_ = 1.0;
  Tensor loss_scale_tensor_;
  LossReduction reduction_;
  bool keep_outputs_;
  nn::Tensors values_;     // each loss, detached, on the last stage's device
  nn::Tensors grads_;      // d(mini-batch loss)/d(loss_j), until its backward
  std::vector<ActionSite> sites_;  // per micro-batch
};

}  // namespace pipewright::pipeline
