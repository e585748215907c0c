// What a pipeline step gives back and the loss types it takes: StepResult, StepCounters,
// Failure, LossFn / TupleLossFn, LossReduction. pipe.h's callers see these without the
// runtime's Step (step.h).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "nn/tensors.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/trace.h"
#include "tensor/tensor.h"

namespace pipewright::pipeline {

/// loss_fn(output_mb, target_mb) -> a one-element loss of the micro-batch (its mean over the
/// micro-batch's rows under LossReduction::kMean, its sum under kSum).
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;
/// The tuple form: every output of the last stage and every target of one micro-batch.
using TupleLossFn =
    std::function<Tensor(const nn::Tensors& outputs, const nn::Tensors& targets)>;

/// `loss_fn` as a tuple loss (null stays null): loss_fn(outputs[0], targets[0]), throwing
/// std::invalid_argument naming the count when the last stage returned other than one tensor.
TupleLossFn as_tuple_loss(const LossFn& loss_fn);

/// How the micro-batches' losses make the mini-batch's (Note [Loss scaling],
/// pipe_train_step.cc): kMean, loss = Σ_j (n_j / N)·loss_j for loss functions that average
/// over their micro-batch (PyTorch's reduction='mean'); kSum, loss = Σ_j loss_j for loss
/// functions that sum (reduction='sum').
enum class LossReduction { kMean, kSum };

/// Actions run per stage during a step (the tests' window into checkpointing).
struct StepCounters {
  std::vector<int> forwards;      // F
  std::vector<int> recomputes;    // R
  std::vector<int> backwards;     // B and I
  std::vector<int> weight_grads;  // W

  explicit StepCounters(int num_stages = 0)
      : forwards(num_stages), recomputes(num_stages), backwards(num_stages),
        weight_grads(num_stages) {}
};

/// Where a step's first exception began (Pipe::last_failure()). The exception itself reaches
/// the caller unchanged; this says which action raised it.
struct Failure {
  int worker = -1;
  int action_index = -1;      // position in the worker's action list of that phase (forward()
                              // and its backward are two phases; train_step is one)
  Action action;              // stage, kind (F, R, B, I, W), micro-batch
  std::exception_ptr error;   // the original exception, as the caller received it
  std::string what;           // its what() ("unknown exception" when not a std::exception)
  int64_t actions_after = 0;  // actions other workers started after it (at most workers - 1)

  /// "stage 1 (worker 1), micro-batch 2, action 3 of the worker (B2@1): <what>".
  std::string str() const;
};

/// What train_step and eval_step return.
struct StepResult {
  double loss = 0;                         // the mini-batch's loss: Σ_j (n_j / N)·loss_j
                                           // (LossReduction::kMean) or Σ_j loss_j (kSum)
  std::vector<double> microbatch_losses;   // loss_fn of each micro-batch, unscaled
  std::vector<int64_t> microbatch_sizes;   // n_j
  nn::Tensors outputs;                     // StepOptions::return_outputs: the last stage's
                                           // outputs, gathered, on its device (no history)
  Schedule schedule;                       // the schedule that ran (R actions included)
  Trace trace;                             // every action's timing
  StepCounters counters;                   // actions run per stage
  bool skipped = false;                    // the whole step with StepOptions::grad_scaler:
                                           // a gradient overflowed, so no parameter or
                                           // optimizer state changed (the scale backed off)
};

}  // namespace pipewright::pipeline
