#include "pipeline/pipe_backward.h"

#include <algorithm>
#include <stdexcept>

#include "autograd/engine.h"
#include "pipeline/runtime.h"
#include "pipeline/tied_parameters.h"

namespace pipewright::pipeline {

PipeBackward::PipeBackward(std::weak_ptr<Runtime> runtime, std::shared_ptr<Step> step,
                           std::vector<std::vector<Action>> actions,
                           std::vector<InputInfo> inputs, std::vector<int> output_dims,
                           std::vector<std::vector<int64_t>> output_sizes,
                           std::vector<size_t> recorded,
                           std::shared_ptr<const TiedParameters> tied)
    : runtime_(std::move(runtime)),
      step_(std::move(step)),
      actions_(std::move(actions)),
      inputs_(std::move(inputs)),
      output_dims_(std::move(output_dims)),
      output_sizes_(std::move(output_sizes)),
      recorded_(std::move(recorded)),
      tied_(std::move(tied)) {}

nn::Tensors PipeBackward::apply(const nn::Tensors& grad_outputs,
                                        const std::vector<bool>& wanted) {
  check_not_released();
  nn::Tensors result(num_inputs());
  const auto first_parameter = wanted.begin() + static_cast<std::ptrdiff_t>(inputs_.size());
  const bool wants_inputs = std::find(wanted.begin(), first_parameter, true) != first_parameter;
  const bool wants_weights = std::find(first_parameter, wanted.end(), true) != wanted.end();
  if (!wants_inputs && weights_done_) {  // the W half of a deferred backward: already done
    weights_done_ = false;
    return result;
  }
  if (step_ == nullptr) {
    throw std::logic_error(
        "PipeBackward: an earlier backward through this output failed, and its step with it; "
        "run Pipe::forward again");
  }
  std::shared_ptr<Runtime> runtime = runtime_.lock();
  if (runtime == nullptr) {
    throw std::logic_error("PipeBackward: the Pipe was destroyed before backward ran");
  }
  // Note [Backward through a Pipe, again]. Without retain_graph the step is consumed.
  const bool retain = autograd::retains_graph();
  std::shared_ptr<Step> step = retain ? step_ : std::move(step_);
  for (std::vector<Cell>& stage : step->cells) {
    for (Cell& cell : stage) cell.set_retain_graph(retain);
  }

  // dOut[k] -> per micro-batch pieces on output k's dim, in the order the last stage
  // produced them (views on dim 0, copies on another: microbatch.h).
  const size_t num_outputs = output_sizes_.size();
  for (int j = 0; j < step->num_microbatches; ++j) {
    step->output_grads[j].assign(num_outputs, Tensor());
  }
  for (size_t r = 0; r < recorded_.size() && r < grad_outputs.size(); ++r) {
    const size_t k = recorded_[r];
    nn::Tensors parts =
        split_sections(grad_outputs[r], output_sizes_[k], output_dims_[k]);
    for (int j = 0; j < step->num_microbatches; ++j) step->output_grads[j][k] = parts[j];
  }

  auto every_stage = [](int) { return true; };  // Pipe::forward runs in one process
  tied_->begin_backward(every_stage);
  // The runtime's second way in, beside Pipe::run: the backward phase goes to execute()
  // directly, without Pipe::run's deferred BatchNorm commit (or discard on failure), because
  // this step's statistics are already settled: Pipe::forward's forward phase committed them
  // (deferred_batch_norm.h), and the only forwards here are recomputes, which add none
  // (BatchNorm1d skips its statistics while autograd::is_recomputing()). There is nothing of
  // this step to commit or discard, and by now the Pipe may have run later steps (a backward
  // held back, or run again with retain_graph), whose statistics are not this one's to touch.
  try {
    runtime->execute(*step, actions_);
  } catch (...) {
    step_.reset();  // a failed backward leaves nothing to retry
    throw;
  }
  tied_->reduce(every_stage, nullptr);
  weights_done_ = !wants_weights;
  if (retain) {  // the kept graphs include the recomputed ones
    for (std::vector<Action>& list : actions_) {
      std::erase_if(list, [](const Action& a) { return a.kind == ActionKind::kRecompute; });
    }
  }

  nn::Tensors input_grads = gather_input_grads(step->input_grads, inputs_, step->inputs.sizes);
  for (size_t i = 0; i < inputs_.size() && i < result.size(); ++i) {
    if (wanted[i]) result[i] = input_grads[i];
  }
  return result;
}

void PipeBackward::release_saved() {
  step_.reset();
  mark_released();
}

}  // namespace pipewright::pipeline
