// Pipe::train_step: one mini-batch's forward and backward under any schedule, with the loss
// computed per micro-batch on the last stage.
//
// Note [Loss scaling]
// The user's loss_fn is a mean over its micro-batch: loss_j = (1/n_j) Σ_{i∈j} ℓ_i. The
// mini-batch loss is L = (1/N) Σ_i ℓ_i = Σ_j (n_j/N)·loss_j, so dL/dθ = Σ_j (n_j/N)·dloss_j/dθ.
// The last stage's B therefore starts micro-batch j's backward from the gradient n_j/N
// (a one-element tensor) instead of 1: no extra op in the graph, and with uneven micro-batches
// (7 rows in 4 chunks: 2,2,2,1) the parameter gradients still equal the whole-batch ones.
#include <stdexcept>
#include <string>

#include "autograd/engine.h"
#include "pipeline/deferred_batch_norm.h"
#include "pipeline/microbatch.h"
#include "pipeline/pipe.h"
#include "pipeline/plan.h"
#include "pipeline/processes.h"
#include "pipeline/runtime.h"
#include "pipeline/schedule/validate.h"
#include "pipeline/schedule/generators.h"

namespace pipewright::pipeline {

StepResult Pipe::train_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn) {
  return run_train_step(input, target, loss_fn, nullptr, options_.schedule);
}

StepResult Pipe::train_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn,
                            const std::string& schedule) {
  return run_train_step(input, target, loss_fn, nullptr, schedule);
}

StepResult Pipe::train_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn,
                            const Schedule& schedule) {
  return run_train_step(input, target, loss_fn, &schedule, schedule.name);
}

StepResult Pipe::run_train_step(const Tensor& input, const Tensor& target,
                                const LossFn& loss_fn, const Schedule* given,
                                const std::string& name) {
  if (!loss_fn) throw std::invalid_argument("train_step: loss_fn is empty");
  if (!input.defined() || !target.defined()) {
    throw std::invalid_argument("train_step: input and target must be defined");
  }
  MicroBatches batches = scatter({input}, {}, options_.chunks);
  if (target.dim() == 0 || target.size(0) != batches.batch_size) {
    throw std::invalid_argument("train_step: input and target differ in batch size (input: " +
                                input.shape().str() + ", target: " + target.shape().str() + ")");
  }
  const int m = batches.count();
  const int p = num_workers();

  Schedule schedule;
  if (given != nullptr) {
    schedule = *given;
  } else {
    schedule = make_schedule(name, p, m, options_.virtual_stages);
    schedule = with_recompute(schedule, checkpoint_predicate(options_.checkpoint, m));
  }
  check_schedule_fits(schedule, p, runtime_->stage_worker(), m);
  schedule.skips = runtime_->skips().edges();  // the model's portals, whoever made the schedule
  validate(schedule);

  std::vector<int64_t> sizes = batches.sizes;
  Processes* processes = options_.processes.get();
  auto step = std::make_shared<Step>(num_stages(), p, std::move(batches), CellMode::kRecord,
                                     recomputed_cells(schedule),
                                     processes ? processes->make_transport(runtime_->stage_worker()) : nullptr);
  step->input_needs_grad = {static_cast<char>(input.requires_grad())};
  step->loss_fn = loss_fn;
  const Device last_device = runtime_->stage_devices().back();
  for (const Tensor& t : target.chunk(options_.chunks)) step->targets.push_back(t.to(last_device));

  try {
    runtime_->execute(*step, schedule.actions);
  } catch (...) {
    runtime_->publish(*step);
    if (deferred_ != nullptr) deferred_->discard();  // the failed step's statistics
    throw;
  }
  runtime_->publish(*step);
  if (processes != nullptr) processes->step_finished(*step);
  if (module_.is_training()) commit_batch_norm();

  // An input that requires grad gets its gradient like loss.backward() would give it: into
  // .grad for a leaf, on through its own graph otherwise (only where stage 0 ran).
  if (input.requires_grad() && (processes == nullptr || processes->runs_worker(0))) {
    nn::Tensors grads =
        gather_input_grads(step->input_grads, describe_inputs({input}, {}), sizes);
    if (grads[0].defined()) autograd::backward({input}, {grads[0]});
  }

  StepResult result;
  result.microbatch_losses = step->losses;
  result.microbatch_sizes = sizes;
  for (int j = 0; j < m; ++j) result.loss += step->loss_scale(j) * step->losses[j];
  result.trace = step->trace();
  result.counters = step->counters;
  result.schedule = std::move(schedule);
  return result;
}

}  // namespace pipewright::pipeline
