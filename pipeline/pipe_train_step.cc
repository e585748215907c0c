// Pipe::train_step: one mini-batch's forward and backward under any schedule, with the loss
// computed per micro-batch on the last stage; Pipe::eval_step: its forward and loss only.
//
// Note [Loss scaling]
// The user's loss_fn is a mean over its micro-batch: loss_j = (1/n_j) Σ_{i∈j} ℓ_i. The
// mini-batch loss is L = (1/N) Σ_i ℓ_i = Σ_j (n_j/N)·loss_j, so dL/dθ = Σ_j (n_j/N)·dloss_j/dθ.
// The last stage's B therefore starts micro-batch j's backward from the gradient n_j/N
// (a one-element tensor) instead of 1: no extra op in the graph, and with uneven micro-batches
// (7 rows in 4 chunks: 2,2,2,1) the parameter gradients still equal the whole-batch ones.
// A loss_fn that sums over its micro-batch (LossReduction::kSum) needs weight 1: L = Σ_j loss_j.
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "autograd/engine.h"
#include "pipeline/deferred_batch_norm.h"
#include "pipeline/microbatch.h"
#include "pipeline/pipe.h"
#include "pipeline/pipe_schedule.h"
#include "pipeline/processes.h"
#include "pipeline/runtime.h"
#include "pipeline/step.h"
#include "pipeline/tied_parameters.h"
#include "pipeline/schedule/validate.h"
#include "pipeline/schedule/generators.h"

namespace pipewright::pipeline {
namespace {

void check_defined(const Tensor& input, const Tensor& target) {
  if (!input.defined() || !target.defined()) {
    throw std::invalid_argument("train_step: input and target must be defined");
  }
}

/// StepOptions::loss_scale: positive and finite; 1 for eval_step (no backward to scale).
void check_loss_scale(const char* what, double scale, bool with_backward) {
  if (!with_backward && scale != 1.0) {
    throw std::invalid_argument(std::string(what) + ": StepOptions::loss_scale is " +
                                std::to_string(scale) +
                                ", but an evaluation runs no backward to scale; leave it 1");
  }
  if (!(scale > 0) || std::isinf(scale)) {
    throw std::invalid_argument(std::string(what) + ": StepOptions::loss_scale must be "
                                "positive and finite, got " + std::to_string(scale));
  }
}

}  // namespace

StepResult Pipe::train_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn,
                            const StepOptions& options) {
  check_defined(input, target);
  return run_step({input}, {target}, as_tuple_loss(loss_fn), options, true);
}

StepResult Pipe::train_step(const nn::Tensors& inputs, const nn::Tensors& targets,
                            const TupleLossFn& loss_fn, const StepOptions& options) {
  return run_step(inputs, targets, loss_fn, options, true);
}

StepResult Pipe::eval_step(const nn::Tensors& inputs, const nn::Tensors& targets,
                           const TupleLossFn& loss_fn, const StepOptions& options) {
  return run_step(inputs, targets, loss_fn, options, false);
}

StepResult Pipe::eval_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn,
                           const StepOptions& options) {
  check_defined(input, target);
  return run_step({input}, {target}, as_tuple_loss(loss_fn), options, false);
}

StepResult Pipe::run_step(const nn::Tensors& inputs, const nn::Tensors& targets,
                          const TupleLossFn& loss_fn, const StepOptions& options,
                          bool with_backward, std::shared_ptr<Step>* captured,
                          const Tensor& loss_scale) {
  check_not_moved_from();
  const char* what = with_backward ? "train_step" : "eval_step";
  if (!loss_fn) throw std::invalid_argument(std::string(what) + ": loss_fn is empty");
  check_loss_scale(what, options.loss_scale, with_backward);
  if (options.max_grad_norm != 0.0) {
    throw std::invalid_argument(std::string(what) + ": StepOptions::max_grad_norm is " +
                                std::to_string(options.max_grad_norm) +
                                ": clipping belongs to the whole step, train_step with an "
                                "optimizer (or call Pipe::clip_grad_norm before step)");
  }
  if (options.grad_scaler != nullptr) {
    throw std::invalid_argument(std::string(what) + ": StepOptions::grad_scaler belongs to the "
                                "whole step, train_step with an optimizer (or pass "
                                "loss_scale = scaler.scale() and call Pipe::unscale_grads)");
  }
  MicroBatches batches = scatter(inputs, options.input_chunks, options_.chunks);
  std::vector<nn::Tensors> target_pieces =
      split_to(targets, options.target_chunks, batches.sizes, "target");
  const int m = batches.count();
  const int p = num_workers();

  Schedule schedule;
  if (!with_backward) {
    if (options.schedule.has_value()) {
      throw std::invalid_argument(
          "eval_step: StepOptions::schedule is set, but an evaluation runs the forwards only "
          "(of GPipe, or looped BFS for several stages per worker); leave it unset");
    }
    schedule = fill_drain_schedule(m);  // its forward phase: F actions only
    schedule.actions = split_fill_drain(schedule).forward;
  } else {
    schedule = options.schedule.has_value() ? *options.schedule : schedule_for(m);
  }
  check_schedule_fits(schedule, p, runtime().stage_worker(), m);
  schedule.skips = runtime().skips().edges();  // the model's portals, whoever made the schedule
  if (with_backward) validate(schedule);  // (a forward phase alone is no complete schedule)

  const std::vector<int64_t> sizes = batches.sizes;
  Processes* processes = options_.processes.get();
  auto step = std::make_shared<Step>(
      num_stages(), p, std::move(batches), with_backward ? CellMode::kRecord : CellMode::kNoGrad,
      recomputed_cells(schedule),
      processes ? processes->make_transport(runtime().stage_worker()) : nullptr);
  for (const Tensor& t : inputs) {
    step->input_needs_grad.push_back(with_backward && t.requires_grad());
  }
  const Device last_device = runtime().stage_devices().back();
  for (nn::Tensors& piece : target_pieces) {
    for (Tensor& t : piece) t = t.defined() ? t.to(last_device) : t;
  }
  step->loss = std::make_unique<StepLoss>(
      loss_fn, std::move(target_pieces), sizes, options.reduction, options.return_outputs,
      options.loss_scale, loss_scale.defined() ? loss_scale.to(last_device) : Tensor());
  step->arguments = options.arguments;
  step->precision = options_.precision;
  step->random_key = random_key();
  step->random_key.first_sample = options.first_sample;
  step->defer_read = captured != nullptr;  // Note [A step as one graph]
  step->device_timeline = options.device_timeline;
  if (with_backward) ++random_step_;

  auto runs_stage = [this](int s) { return this->runs_stage(s); };
  if (with_backward) tied_->begin_backward(runs_stage);
  run(*step, schedule.actions);
  if (processes != nullptr) processes->step_finished(*step);
  if (with_backward) tied_->reduce(runs_stage, processes);  // Note [Tied parameters]

  // An input that requires grad gets its gradient like loss.backward() would give it: into
  // .grad for a leaf, on through its own graph otherwise (only where stage 0 ran).
  if (with_backward && (processes == nullptr || processes->runs_worker(0))) {
    nn::Tensors grads = gather_input_grads(
        step->input_grads, describe_inputs(inputs, options.input_chunks), sizes);
    nn::Tensors with_grad, their_grads;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].defined() && inputs[i].requires_grad() && grads[i].defined()) {
        with_grad.push_back(inputs[i]);
        their_grads.push_back(grads[i]);
      }
    }
    if (!with_grad.empty()) autograd::backward(with_grad, their_grads);
  }

  StepResult result;
  result.microbatch_losses = step->losses;
  result.microbatch_sizes = sizes;
  for (int j = 0; j < m; ++j) result.loss += step->loss->scale(j) * step->losses[j];
  if (options.return_outputs && (processes == nullptr || processes->runs_worker(
                                                            runtime().stage_worker().back()))) {
    result.outputs = gather(step->outputs, options.output_dims);
  }
  result.trace = step->trace();
  result.counters = step->counters;
  result.schedule = std::move(schedule);
  if (captured != nullptr) *captured = std::move(step);
  return result;
}

}  // namespace pipewright::pipeline
