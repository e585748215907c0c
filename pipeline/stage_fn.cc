#include "pipeline/stage_fn.h"

#include <stdexcept>
#include <string>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/shape_ops.h"
#include "nn/skip.h"
#include "pipeline/stage_skips.h"

namespace pipewright::pipeline {
namespace {

// Note [A stage's output on another device]
// A stage may return tensors on a device other than its own (a module that ends with
// to(other)). Each is copied back to the stage's device with the differentiable
// autograd::to, inside the cell, so the copy is recorded (and recomputed under
// checkpointing) like any layer: its backward takes the gradient from the stage's device
// back to where the module left the tensor. Everything that leaves a stage is then on that
// stage's device, as everything entering it is (to_stage, the transport): the next stage
// receives from one known device, memory is counted there, and Pipe::forward returns on the
// last stage's device. torchgpipe gets the same by copying every stage's output to the next
// device; the value is unchanged either way, the cost one copy per such tensor. Refusing
// such a stage was the other choice; copying keeps every model that runs unpipelined
// runnable in a Pipe. Tested on CPU devices (pipe_output_device_test) and on simulated GPUs
// (tests/cuda/pipe_fault_test).
nn::Tensors on_stage_device(nn::Tensors tensors, Device device) {
  for (Tensor& t : tensors) {
    if (t.defined() && t.device() != device) t = autograd::to(t, device);
  }
  return tensors;
}

// Note [A loss without history]
// A cell that records (train_step's F, or R of a checkpointed cell) must end in a loss with
// autograd history, or its backward would have nothing to run: the last stage's parameters
// would get no gradient and the stages before it none from this micro-batch, while the step
// returned a plausible loss. The plain model's loss.backward() refuses such a loss; so does
// the pipeline, here, where the stage's outputs and the loss are both in view and the message
// can say which of the two lost the history. A checkpointed cell's F runs under NoGradGuard,
// where no loss has history, so it is checked at its R. (Cell::backward refuses the other
// half of the same mistake: a stage whose outputs get no gradient from the next one.)
[[noreturn]] void throw_loss_without_history(const nn::Tensors& outputs, int s, int j) {
  bool outputs_have_history = false;
  for (const Tensor& t : outputs) outputs_have_history |= t.defined() && t.requires_grad();
  const std::string where = "train_step: the loss of micro-batch " + std::to_string(j) +
                            " (last stage, " + std::to_string(s) + ") has no autograd history, ";
  if (outputs_have_history) {
    throw std::invalid_argument(
        where + "though the stage's outputs have one: loss_fn dropped it, so no backward could "
                "reach the model and the step would train nothing. " +
        autograd::kTensorMethodsRecordNoHistory + " (e.g. autograd::reshape(logits, {-1, V}))");
  }
  throw std::invalid_argument(
      where + "and neither have the stage's outputs: no parameter of the stage reached them with "
              "history and its inputs carried none, so the step would train nothing. Check that "
              "the model's parameters require grad; " +
      autograd::kTensorMethodsRecordNoHistory);
}

}  // namespace

std::function<nn::Tensors(const nn::Tensors&)> stage_function(nn::Sequential& module,
                                                              Device device,
                                                              const SkipLayout& skips, int s,
                                                              int j, const nn::Arguments& arguments,
                                                              StageLoss loss) {
  bool has_skips = false;
  for (const SkipRoute& route : skips.routes()) {
    has_skips = has_skips || route.stash_stage == s || route.pop_stage == s;
  }
  const bool with_loss = loss.loss_fn != nullptr && *loss.loss_fn;
  if (!has_skips && !with_loss && arguments.empty()) {
    return [&module, device](const nn::Tensors& in) {
      return on_stage_device(module.forward(in), device);
    };
  }
  return [&module, &skips, &arguments, device, s, j, has_skips, with_loss,
          loss](const nn::Tensors& in) {
    nn::ArgumentsGuard installed_arguments(arguments);
    nn::Tensors out, stashed;
    if (has_skips) {
      const auto regular = static_cast<std::ptrdiff_t>(in.size() - skips.portals_in(s).size());
      StageSkips tracker(skips, s, j, nn::Tensors(in.begin() + regular, in.end()));
      nn::SkipTrackerGuard installed(tracker);
      out = on_stage_device(module.forward(nn::Tensors(in.begin(), in.begin() + regular)),
                            device);
      stashed = on_stage_device(tracker.finish(), device);
    } else {
      out = on_stage_device(module.forward(in), device);
    }
    if (with_loss) {
      if (loss.kept_outputs != nullptr) {
        nn::Tensors kept;
        for (const Tensor& t : out) kept.push_back(t.defined() ? t.detach() : t);
        *loss.kept_outputs = std::move(kept);
      }
      Tensor value = (*loss.loss_fn)(out, *loss.targets);
      if (!value.defined() || value.numel() != 1) {
        throw std::invalid_argument(
            "train_step: loss_fn must return a one-element tensor, got " +
            (value.defined() ? value.shape().str() : "undefined"));
      }
      if (autograd::grad_mode_enabled() && !value.requires_grad()) {
        throw_loss_without_history(out, s, j);
      }
      out = {value};
    }
    out.insert(out.end(), stashed.begin(), stashed.end());
    return out;
  };
}

std::function<nn::Tensors(const nn::Tensors&)> under_precision(
    std::function<nn::Tensors(const nn::Tensors&)> run, autograd::Precision precision,
    autograd::WorkingCopies* copies) {
  if (precision == autograd::Precision::kFloat32) return run;
  return [run = std::move(run), precision, copies](const nn::Tensors& in) {
    autograd::PrecisionScope scope(precision, copies);
    return run(in);
  };
}

namespace {

/// Whether a message narrows `t` under `precision`: its float32 tensors, under a 16-bit policy.
bool narrows(const Tensor& t, autograd::Precision precision) {
  return precision != autograd::Precision::kFloat32 && t.defined() &&
         t.dtype() == DType::kFloat32;
}

}  // namespace

// Note [16-bit messages]
// Under a precision policy every layer hands on 16-bit values and their gradients are rounded
// to 16-bit values on the way back (Note [The precision policy], autograd/precision.h). A
// stage's outputs are its last layer's, so the activations crossing to the next stage are
// 16-bit values: they travel in the 16-bit dtype, half the bytes, and are widened back to
// float32 on arrival, exactly. The input gradient a stage sends back meets the rounding of
// the sender's last layer first thing, so rounding it before it travels changes nothing (a
// rounded value rounds to itself) and it too travels in half the bytes. Portals carry what a
// layer stashed mid-way, not a layer's output: they travel as they are. The runtime narrows
// what a cell sends and widens what it receives; the planner's stage probe does the same.
nn::Tensors narrow_message(nn::Tensors tensors, autograd::Precision precision) {
  for (Tensor& t : tensors) {
    if (narrows(t, precision)) t = t.to(autograd::precision_dtype(precision));
  }
  return tensors;
}

int64_t message_bytes(const nn::Tensors& tensors, autograd::Precision precision) {
  const auto narrowed = static_cast<int64_t>(element_size(autograd::precision_dtype(precision)));
  int64_t bytes = 0;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    bytes += narrows(t, precision) ? t.numel() * narrowed : static_cast<int64_t>(t.nbytes());
  }
  return bytes;
}

nn::Tensors widen_message(nn::Tensors tensors, autograd::Precision precision) {
  if (precision == autograd::Precision::kFloat32) return tensors;
  for (Tensor& t : tensors) {
    if (t.defined() && t.dtype() == autograd::precision_dtype(precision)) {
      t = t.to(DType::kFloat32);
    }
  }
  return tensors;
}

}  // namespace pipewright::pipeline
