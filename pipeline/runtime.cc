#include "pipeline/runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "autograd/engine.h"
#include "nn/random_key.h"
#include "pipeline/stage_fn.h"
#include "pipeline/step_readback.h"
#include "tensor/stream.h"
#include "tensor/threads.h"

namespace pipewright::pipeline {
namespace {

/// The caller's tensors (stage 0's micro-batches, the user's output gradients) on a stage's
/// device, copied there on the worker's compute stream when they live elsewhere, and marked
/// as used by that stream (Note [Streams in the pipeline]: their memory belongs to the
/// caller's stream, which may free it while the worker still reads it).
nn::Tensors to_stage(const nn::Tensors& tensors, Device device) {
  const Stream compute = Stream::current(device);
  nn::Tensors out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    out.push_back(t.defined() ? t.to(device) : Tensor());
    record_stream(out.back(), compute);
  }
  return out;
}

// A stage whose outputs have autograd history but got no gradient back (Cell::gets_no_gradient):
// whatever came after it dropped the history, and it and every stage before it would train
// nothing from this micro-batch (Note [A loss without history], stage_fn.cc).
[[noreturn]] void throw_no_gradient(int s, int j, bool last) {
  throw std::invalid_argument(
      "backward: stage " + std::to_string(s) + ", micro-batch " + std::to_string(j) +
      ": none of the stage's outputs that have autograd history got a gradient from " +
      (last ? std::string("the caller") : "the stages after it") +
      " (they used them only through operations that record no history), so this stage and "
      "those before it would train nothing. " +
      autograd::kTensorMethodsRecordNoHistory +
      ". To train only the later stages, set requires_grad(false) on the earlier stages' "
      "parameters");
}

}  // namespace

// Note [The caller's streams]
// The caller may issue on any stream it likes (a StreamGuard of its own, or the default
// stream), and the workers issue on theirs, so execute() fences the two at both ends, with
// events, per worker device d (torchgpipe did the same with its Wait/Copy functions):
//
//   caller, current(d):  ─(x, params)─● entered ·····························└wait─► (gather, opt)
//                                     ╎                                       ╎
//   worker w on d:                    └wait─► actions of this step ─● done ───┘
//
//   entry: an event recorded on the caller's current stream of d, waited for by the worker's
//          compute stream before its first action: its kernels see what the caller wrote
//          (inputs, parameters after an optimizer step, output gradients);
//   exit:  an event the worker records after its last action, waited for by the caller's
//          current stream of d before execute() returns; then every tensor handed back
//          (outputs, input gradients, parameter .grad) is record_stream'ed on that stream: its
//          block belongs to a worker's stream, which would otherwise reuse it as soon as the
//          caller frees it, while the caller's kernels may still read it.
// The exit fence also runs when an action failed, before the exception is rethrown (its
// own errors are then dropped: the first exception wins). On CPU every event and
// record_stream is a no-op: nothing changes there but a few virtual calls per step.
void Runtime::execute(Step& step, const std::vector<std::vector<Action>>& actions) {
  std::lock_guard<std::mutex> lock(execute_mutex_);
  if (step.device_timeline && step.device_clocks.empty()) start_device_clocks(step);
  std::vector<Event> entered, done;  // per worker, both on the worker's device
  for (const auto& worker : workers_) {
    entered.emplace_back(worker->device());
    entered.back().record(Stream::current(worker->device()));  // the caller's stream
    done.emplace_back(worker->device());
  }
  auto is_local = [this](int w) { return processes_ == nullptr || processes_->runs_worker(w); };
  int local = 0;
  for (int w = 0; w < num_workers(); ++w) local += is_local(w);
  auto countdown = std::make_shared<Countdown>(local);
  for (int w = 0; w < num_workers(); ++w) {
    if (!is_local(w)) continue;
    const std::vector<Action>* list = &actions.at(static_cast<size_t>(w));
    Event* entry = &entered[static_cast<size_t>(w)];
    Event* exit = &done[static_cast<size_t>(w)];
    workers_[w]->submit([this, &step, w, list, countdown, entry, exit] {
      // Whatever escapes the handlers below (step.fail itself throwing) goes to the caller
      // through the countdown, which is always counted down: no hang, nothing lost.
      std::exception_ptr escaped;
      try {
        try {
          entry->wait(workers_[w]->compute_stream());
          run_actions(step, w, *list);
        } catch (const RunCancelled&) {
          // Another worker failed first; its exception is the one the caller sees.
        } catch (...) {
          step.fail(std::current_exception());
        }
        if (processes_ != nullptr) {
          try {
            processes_->worker_finished(w, step.failed());
          } catch (...) {
            step.fail(std::current_exception());
          }
        }
        try {
          exit->record(workers_[w]->compute_stream());
        } catch (...) {
          step.fail(std::current_exception());
        }
      } catch (...) {
        escaped = std::current_exception();
      }
      countdown->done(std::move(escaped));
    });
  }
  countdown->wait();
  std::exception_ptr error = step.error();
  if (error == nullptr) error = countdown->error();
  if (error != nullptr && processes_ != nullptr) error = processes_->step_failed(step, error);
  try {
    hand_back(step, done);
    if (error == nullptr) finish_device_clocks(step);
    if (error == nullptr) {
      if (step.defer_read) {
        step.gathered = gather_step_values(step);  // read after the graph's launch
      } else {
        read_step_values(step);
      }
      error = step.error();  // a failed deferred check or a non-finite loss, with its action
    }
  } catch (...) {
    if (error == nullptr) error = std::current_exception();
  }
  publish(step);
  if (error != nullptr) std::rethrow_exception(error);
}


// The exit half of Note [The caller's streams].
void Runtime::hand_back(Step& step, const std::vector<Event>& done) {
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (processes_ != nullptr && !processes_->runs_worker(static_cast<int>(w))) continue;
    done[w].wait(Stream::current(workers_[w]->device()));
  }
  auto to_caller = [](const Tensor& t) {
    if (t.defined()) record_stream(t, Stream::current(t.device()));
  };
  for (const nn::Tensors& out : step.outputs) std::for_each(out.begin(), out.end(), to_caller);
  for (const nn::Tensors& g : step.input_grads) std::for_each(g.begin(), g.end(), to_caller);
  for (const nn::Sequential& partition : partitions_) {
    for (const Tensor& p : partition.parameters()) to_caller(p.grad());
  }
}

// Note [A stage's last action]
// With processes (processes.h), a stage's gradients are final after its last action in the
// worker's list, if that list has a backward of it (B, I or W): stage_finished() then
// starts their data-parallel reduction, which overlaps the worker's remaining actions (the
// cool-down of its other stages) and the other processes' work.
void Runtime::run_actions(Step& step, int worker, const std::vector<Action>& actions) {
  std::vector<int> last(partitions_.size(), -1);  // per stage: index of its reducing action
  if (processes_ != nullptr) {
    std::vector<char> backward(partitions_.size(), 0);
    for (size_t i = 0; i < actions.size(); ++i) {
      const auto s = static_cast<size_t>(actions[i].stage);
      last[s] = static_cast<int>(i);
      if (actions[i].kind != ActionKind::kForward && actions[i].kind != ActionKind::kRecompute) {
        backward[s] = 1;
      }
    }
    for (size_t s = 0; s < last.size(); ++s) {
      if (!backward[s]) last[s] = -1;
    }
  }
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& action = actions[i];
    if (step.failed()) return;  // stop after the failing step, do not start new work
    step.count_action_start();
    const ActionSite where{worker, static_cast<int>(i), action};
    try {
      if (fault_hook_) fault_hook_(worker, static_cast<int>(i), action);
      run_action(step, worker, action);
    } catch (const RunCancelled&) {
      (void)take_deferred_checks();  // the step failed: nothing of it is read
      throw;  // another worker failed first
    } catch (...) {
      (void)take_deferred_checks();
      step.fail_at(std::current_exception(), worker, static_cast<int>(i), action);
      return;
    }
    // What the action's kernels left to check, and the loss it made, are read at the end.
    for (DeferredCheck& check : take_deferred_checks()) {
      step.deferred_checks[static_cast<size_t>(worker)].emplace_back(std::move(check), where);
    }
    if (action.kind == ActionKind::kForward && step.is_last(action.stage) && step.loss) {
      step.loss->made_by(action.microbatch, where);
    }
    if (last[static_cast<size_t>(action.stage)] == static_cast<int>(i)) {
      processes_->stage_finished(action.stage, partitions_[static_cast<size_t>(action.stage)]);
    }
  }
  // Note [Waiting for a message due soon]: spin only while no one else holds this worker's
  // core for long (Note [A core shared with other work], tensor/threads.h).
  waiters_[static_cast<size_t>(worker)].watch_core();
}

// The function a cell runs (stage_fn.h): the stage, with its skip connections, plus the
// loss on the last stage of train_step.
StageFn Runtime::stage_fn(Step& step, int s, int j) {
  const StageLoss loss = step.is_last(s) && step.loss != nullptr
                             ? step.loss->stage_loss(j, step.outputs[static_cast<size_t>(j)])
                             : StageLoss{};
  StageFn run = stage_function(partitions_.at(static_cast<size_t>(s)),
                               stage_devices_.at(static_cast<size_t>(s)), skips_, s, j,
                               step.arguments, loss);
  // Every draw of the cell's random layers is keyed (Note [Keyed randomness]): the same in
  // its forward and its recompute, and whatever the cut, the worker or the micro-batching.
  // Under a precision policy the stage's working copies are made by its first cell of the
  // step and reused by the others and by recomputes (Note [The precision policy]).
  return [run = under_precision(std::move(run), step.precision,
                                &step.working_copies.at(static_cast<size_t>(s))),
          key = step.microbatch_key(j)](const nn::Tensors& in) {
    nn::RandomKeyGuard keyed(key);
    return run(in);
  };
}

// A worker waits for a message as for one due when it came in the last step (Note [Waiting
// for a message due soon], channel.h; the worker's MessageWaiter, message_waiter.h).
nn::Tensors Runtime::receive(Step& step, int worker, const MessageKey& key) {
  MessageWaiter<MessageKey>& waiter = waiters_[static_cast<size_t>(worker)];
  const MessageWaiter<MessageKey>::Wait wait = waiter.wait_for(key);
  RecvTiming timing{.expected = wait.expected, .lead = wait.lead};
  nn::Tensors tensors = step.transport().recv(key, timing);
  waiter.arrived(wait, timing.arrived);
  return tensors;
}

nn::Tensors Runtime::recv_portals(Step& step, int worker, const std::vector<int>& routes, int j,
                                  Direction d) {
  nn::Tensors tensors;
  for (int r : routes) {
    const SkipRoute& route = skips_.route(r);
    const int receiver = d == Direction::kActivation ? route.pop_stage : route.stash_stage;
    tensors.push_back(receive(step, worker, MessageKey::to(receiver, j, d, r)).at(0));
  }
  return tensors;
}


void Runtime::send(Step& step, const MessageKey& key, nn::Tensors tensors) {
  const int to = key.receiver();
  const bool forward = key.direction == Direction::kActivation;
  int from = forward ? to - 1 : to + 1;  // a neighbour, or a portal's other end
  if (key.skip >= 0) {
    const SkipRoute& route = skips_.route(key.skip);
    from = forward ? route.stash_stage : route.pop_stage;
  }
  TraceTransfer t;
  t.worker = stage_worker_[static_cast<size_t>(from)];
  t.from_stage = from;
  t.to_stage = to;
  t.microbatch = key.microbatch;
  t.gradient = !forward;
  if (key.skip >= 0) t.skip = skips_.route(key.skip).key.str();
  for (const Tensor& x : tensors) t.bytes += x.defined() ? static_cast<int64_t>(x.nbytes()) : 0;
  t.start_us = micros_since(step.epoch);
  step.transport().send(key, std::move(tensors), stage_devices_[static_cast<size_t>(to)]);
  t.end_us = micros_since(step.epoch);
  step.transfers[static_cast<size_t>(t.worker)].push_back(std::move(t));
}

void Runtime::send_portals(Step& step, const std::vector<int>& routes, int j, Direction d,
                           nn::Tensors& tensors) {
  const size_t first = tensors.size() - routes.size();
  for (size_t k = 0; k < routes.size(); ++k) {
    const SkipRoute& route = skips_.route(routes[k]);
    const int receiver = d == Direction::kActivation ? route.pop_stage : route.stash_stage;
    send(step, MessageKey::to(receiver, j, d, routes[k]), {std::move(tensors[first + k])});
  }
  tensors.resize(first);
}

// One action of the interpreter. A receive happens before the clock starts (waiting is
// idle time); a send, which copies to the receiver's device and never blocks, is part of the
// action.
void Runtime::run_action(Step& step, int worker, const Action& action) {
  TraceEvent event{worker, action.stage, action.kind, action.microbatch, 0, 0};
  switch (action.kind) {
    case ActionKind::kForward:
      forward(step, worker, action, event);
      break;
    case ActionKind::kRecompute: {
      start_action(step, worker, event);
      step.cell(action).recompute(stage_fn(step, action.stage, action.microbatch),
                                  workers_[worker]->generator());
      ++step.counters.recomputes[action.stage];
      break;
    }
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput:
      backward(step, worker, action, event);
      break;
    case ActionKind::kBackwardWeight:
      start_action(step, worker, event);
      step.cell(action).backward_weight();
      ++step.counters.weight_grads[action.stage];
      break;
  }
  event.end_us = micros_since(step.epoch);
  end_on_device(step, worker);  // R and W (F and B ended before their messages)
  step.events[worker].push_back(event);
}

// F: input from the micro-batch (stage 0) or the left stage; output to the right stage, or
// kept for gathering (Pipe::forward), or the loss (train_step).
void Runtime::forward(Step& step, int worker, const Action& action, TraceEvent& event) {
  const int s = action.stage, j = action.microbatch;
  const Device device = stage_devices_[s];
  CellMode mode = step.mode;
  if (mode == CellMode::kRecord && step.checkpointed[s][j]) mode = CellMode::kCheckpoint;
  // Note [16-bit messages] (stage_fn.cc); a checkpointed cell keeps the message as it arrived
  // (Note [16-bit checkpoints], cell.h), any other drops it once widened.
  nn::Tensors arrived;
  nn::Tensors in;
  if (s == 0) {
    in = step.inputs.batches[j];
  } else {
    arrived = receive(step, worker, MessageKey::to(s, j, Direction::kActivation));
    in = mode == CellMode::kCheckpoint ? widen_message(arrived, step.precision)
                                       : widen_message(std::move(arrived), step.precision);
  }
  const std::vector<int>& portals_in = skips_.portals_in(s);
  if (!portals_in.empty()) {
    nn::Tensors popped = recv_portals(step, worker, portals_in, j, Direction::kActivation);
    in.insert(in.end(), popped.begin(), popped.end());
  }
  start_action(step, worker, event);
  if (s == 0) in = to_stage(in, device);
  // Stage 0's inputs need a gradient only when the user's inputs asked for one; later
  // stages' floating inputs always do (empty list).
  static const std::vector<char> kEveryFloatingInput;
  nn::Tensors out = step.cell(action).forward(
      stage_fn(step, s, j), in, mode, workers_[worker]->generator(),
      s == 0 ? step.input_needs_grad : kEveryFloatingInput, arrived);
  arrived.clear();
  end_on_device(step, worker);  // before the messages: a receiver starts after this end
  send_portals(step, skips_.portals_out(s), j, Direction::kActivation, out);
  if (!step.is_last(s)) {
    send(step, MessageKey::to(s + 1, j, Direction::kActivation),
         narrow_message(std::move(out), step.precision));
  } else if (step.loss) {
    step.loss->made(j, out.at(0), step.mode != CellMode::kNoGrad);
  } else {
    step.outputs[j] = std::move(out);
  }
  ++step.counters.forwards[s];
}

// B / I: output gradient from the right stage, from the loss (train_step: n_j / N, Note
// [Loss scaling]) or from the user (Pipe backward); input gradient to the left stage, or kept
// for the user (stage 0).
void Runtime::backward(Step& step, int worker, const Action& action, TraceEvent& event) {
  const int s = action.stage, j = action.microbatch;
  nn::Tensors grads;
  if (!step.is_last(s)) {
    grads = widen_message(receive(step, worker, MessageKey::to(s, j, Direction::kGradient)),
                    step.precision);
  } else if (step.loss) {
    grads = {step.loss->take_grad(j)};
  } else {
    grads = to_stage(step.output_grads.at(static_cast<size_t>(j)), stage_devices_[s]);
  }
  const std::vector<int>& portals_out = skips_.portals_out(s);
  if (!portals_out.empty()) {
    nn::Tensors skip_grads = recv_portals(step, worker, portals_out, j, Direction::kGradient);
    grads.insert(grads.end(), skip_grads.begin(), skip_grads.end());
  }
  start_action(step, worker, event);
  Cell& cell = step.cell(action);
  if (cell.gets_no_gradient(grads)) throw_no_gradient(s, j, step.is_last(s));
  nn::Tensors grad_inputs = action.kind == ActionKind::kBackward ? cell.backward(grads)
                                                                : cell.backward_input(grads);
  end_on_device(step, worker);
  send_portals(step, skips_.portals_in(s), j, Direction::kGradient, grad_inputs);
  if (s == 0) {
    step.input_grads[j] = std::move(grad_inputs);
  } else {
    send(step, MessageKey::to(s - 1, j, Direction::kGradient),
         narrow_message(std::move(grad_inputs), step.precision));
  }
  ++step.counters.backwards[s];
}

}  // namespace pipewright::pipeline
