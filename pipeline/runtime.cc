#include "pipeline/runtime.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "tensor/threads.h"

namespace pipewright::pipeline {
namespace {

nn::Tensors on_device(const nn::Tensors& tensors, Device device) {
  nn::Tensors out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) out.push_back(t.defined() ? t.to(device) : Tensor());
  return out;
}

}  // namespace

Runtime::Runtime(std::vector<nn::Sequential> partitions, std::vector<Device> stage_devices,
                 std::vector<int> stage_worker, int num_workers, uint64_t seed)
    : partitions_(std::move(partitions)),
      stage_devices_(std::move(stage_devices)),
      stage_worker_(std::move(stage_worker)) {
  const int budget = std::max(1, hardware_threads() / std::max(1, num_workers));
  for (int w = 0; w < num_workers; ++w) {
    workers_.push_back(std::make_unique<Worker>(w, budget, mix_seed(seed, w)));
  }
}

void Runtime::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(execute_mutex_);
  for (auto& w : workers_) w->generator().set_state(mix_seed(seed, w->index()), 0);
}

void Runtime::execute(Step& step, const std::vector<std::vector<Action>>& actions) {
  std::lock_guard<std::mutex> lock(execute_mutex_);
  auto countdown = std::make_shared<Countdown>(num_workers());
  for (int w = 0; w < num_workers(); ++w) {
    const std::vector<Action>* list = &actions.at(static_cast<size_t>(w));
    workers_[w]->submit([this, &step, w, list, countdown] {
      try {
        run_actions(step, w, *list);
      } catch (const RunCancelled&) {
        // Another worker failed first; its exception is the one the caller sees.
      } catch (...) {
        step.fail(std::current_exception());
      }
      countdown->done();
    });
  }
  countdown->wait();
  if (std::exception_ptr error = step.error()) std::rethrow_exception(error);
}

void Runtime::run_actions(Step& step, int worker, const std::vector<Action>& actions) {
  for (const Action& action : actions) {
    if (step.failed()) return;  // stop after the failing step, do not start new work
    run_action(step, worker, action);
  }
}

// One action of the interpreter. Receives happen before `start` is taken (waiting is idle);
// sends, which copy to the receiver's device and never block, are part of the action.
void Runtime::run_action(Step& step, int worker, const Action& action) {
  const int s = action.stage;
  const int j = action.microbatch;
  nn::Sequential& module = partitions_.at(static_cast<size_t>(s));
  const Device device = stage_devices_[s];
  Cell& cell = step.cells.at(static_cast<size_t>(s)).at(static_cast<size_t>(j));
  Generator& rng = workers_[worker]->generator();
  const bool last = step.is_last(s);

  // The function the cell runs: the stage, plus the loss on the last stage of train_step.
  StageFn fn = [&module](const nn::Tensors& in) { return module.forward(in); };
  if (last && step.loss_fn) {
    fn = [&module, &step, j](const nn::Tensors& in) {
      nn::Tensors out = module.forward(in);
      if (out.size() != 1) {
        throw std::invalid_argument("train_step: the last stage must return one tensor for "
                                    "the loss, got " + std::to_string(out.size()));
      }
      Tensor loss = step.loss_fn(out[0], step.targets[j]);
      if (!loss.defined() || loss.numel() != 1) {
        throw std::invalid_argument("train_step: loss_fn must return a one-element tensor, got " +
                                    (loss.defined() ? loss.shape().str() : "undefined"));
      }
      return nn::Tensors{loss};
    };
  }

  TraceEvent event{worker, s, action.kind, j, 0, 0};
  switch (action.kind) {
    case ActionKind::kForward: {
      nn::Tensors in =
          s == 0 ? step.inputs.batches[j] : step.transport().recv({s - 1, j, Direction::kActivation});
      event.start_us = micros_since(step.epoch);
      if (s == 0) in = on_device(in, device);
      CellMode mode = step.mode;
      if (mode == CellMode::kRecord && step.checkpointed[s][j]) mode = CellMode::kCheckpoint;
      // Stage 0's inputs need a gradient only when the user's inputs asked for one.
      static const std::vector<char> kFloatingInputs;
      nn::Tensors out =
          cell.forward(fn, in, mode, rng, s == 0 ? step.input_needs_grad : kFloatingInputs);
      if (last && step.loss_fn) {
        step.losses[j] = out.at(0).item();
        step.loss_grads[j] = Tensor::full(out[0].shape(), step.loss_scale(j),
                                          {out[0].dtype(), out[0].device()});
      } else if (last) {
        step.outputs[j] = std::move(out);
      }
      if (!last) {
        step.transport().send({s, j, Direction::kActivation}, std::move(out),
                              stage_devices_[s + 1]);
      }
      event.end_us = micros_since(step.epoch);
      ++step.counters.forwards[s];
      break;
    }
    case ActionKind::kRecompute: {
      event.start_us = micros_since(step.epoch);
      cell.recompute(fn, rng);
      event.end_us = micros_since(step.epoch);
      ++step.counters.recomputes[s];
      break;
    }
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput: {
      nn::Tensors grads;
      if (!last) {
        grads = step.transport().recv({s, j, Direction::kGradient});
      } else if (step.loss_fn) {
        grads = {step.loss_grads[j]};
      } else {
        grads = on_device(step.output_grads.at(static_cast<size_t>(j)), device);
      }
      event.start_us = micros_since(step.epoch);
      nn::Tensors grad_inputs = action.kind == ActionKind::kBackward ? cell.backward(grads)
                                                                    : cell.backward_input(grads);
      if (s == 0) {
        step.input_grads[j] = std::move(grad_inputs);
      } else {
        step.transport().send({s - 1, j, Direction::kGradient}, std::move(grad_inputs),
                              stage_devices_[s - 1]);
      }
      event.end_us = micros_since(step.epoch);
      ++step.counters.backwards[s];
      break;
    }
    case ActionKind::kBackwardWeight: {
      event.start_us = micros_since(step.epoch);
      cell.backward_weight();
      event.end_us = micros_since(step.epoch);
      ++step.counters.weight_grads[s];
      break;
    }
  }
  step.events[worker].push_back(event);
}

void Runtime::publish(const Step& step) {
  Trace trace = step.trace();
  std::lock_guard<std::mutex> lock(last_mutex_);
  last_trace_ = std::move(trace);
  last_counters_ = step.counters;
}

Trace Runtime::last_trace() const {
  std::lock_guard<std::mutex> lock(last_mutex_);
  return last_trace_;
}

StepCounters Runtime::last_counters() const {
  std::lock_guard<std::mutex> lock(last_mutex_);
  return last_counters_;
}

}  // namespace pipewright::pipeline
