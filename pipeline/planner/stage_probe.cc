// probe_stage: Note [Probing a stage] (stage_probe.h).
#include "pipeline/planner/stage_probe.h"

#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "autograd/grad_mode.h"
#include "pipeline/cell.h"
#include "pipeline/deferred_batch_norm.h"
#include "pipeline/planner/profile.h"
#include "pipeline/profile_state.h"
#include "pipeline/skip_layout.h"
#include "pipeline/stage_fn.h"
#include "pipeline/step_loss.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"

namespace pipewright::pipeline {
namespace {

int64_t bytes_of(const nn::Tensors& tensors) {
  int64_t total = 0;
  for (const Tensor& t : tensors) total += t.defined() ? static_cast<int64_t>(t.nbytes()) : 0;
  return total;
}

// The model cut into [0, first), [first, last) and [last, n) (the empty ones left out), with
// the probed stage's index. Throws when a skip passes over the stage whole (Note [Cuts inside
// a skip], cuts.h): its portal's timing is not the stage's messages'.
std::pair<SkipLayout, int> probe_layout(const nn::Sequential& model, int first, int last) {
  const int n = static_cast<int>(model.size());
  std::vector<int> balance;
  for (int b : {first, last - first, n - last}) {
    if (b > 0) balance.push_back(b);
  }
  const int s = first > 0 ? 1 : 0;
  SkipLayout layout(model, balance);
  for (const SkipRoute& route : layout.routes()) {
    if (route.stash_stage < s && route.pop_stage > s) {
      throw std::invalid_argument("probe_stage: skip " + route.str() + " passes over layers [" +
                                  std::to_string(first) + ", " + std::to_string(last) +
                                  ") whole: a stage must stash or pop every skip crossing it");
    }
  }
  return {std::move(layout), s};
}

// One stage's two cells and the runtime's part of each action (runtime.cc: Runtime::forward
// and Runtime::backward), on the calling thread. The last stage's loss is the StepLoss a
// train_step installs, over two micro-batches of `rows` rows with the same targets (handles
// of one tensor: no extra bytes): its value kept, its gradient seed made in F, taken by B.
class Probe {
 public:
  // `layout` and `s` as probe_layout's; `first_input` ends with the portals popped here.
  // `precision`: the policy the cells run under, with the probe's working copies (a step's
  // first cell of the stage makes them; end_series drops them, as a step's end does), and
  // the messages narrowed and widened as the runtime's (Note [16-bit messages], stage_fn.cc).
  Probe(nn::Sequential& stage, Device device, const SkipLayout& layout, int s,
        nn::Tensors first_input, bool is_first, bool is_last, const LossFn& loss_fn,
        const nn::Tensors& targets, int64_t rows, autograd::Precision precision)
      : stage_(stage), device_(device), allocator_(allocator_for(device)),
        input_(std::move(first_input)), is_first_(is_first), precision_(precision),
        portals_in_(layout.portals_in(s).size()), portals_out_(layout.portals_out(s).size()) {
    if (is_last) {
      loss_.emplace(as_tuple_loss(loss_fn), std::vector<nn::Tensors>{targets, targets},
                    std::vector<int64_t>{rows, rows}, LossReduction::kMean,
                    /*keep_outputs=*/false);
    }
    for (int k = 0; k < 2; ++k) {
      fns_[k] = under_precision(
          stage_function(stage, device, layout, s, k, arguments_,
                         loss_ ? loss_->stage_loss(k, unkept_outputs_) : StageLoss{}),
          precision, &working_copies_);
    }
    for (const Tensor& t : input_) needs_grad_.push_back(!is_first || t.requires_grad());
  }
  Probe(const Probe&) = delete;  // fns_ point into loss_ and working_copies_
  Probe& operator=(const Probe&) = delete;

  // What `action` did to the device's counter.
  template <class Action>
  ActionBytes measure(Action&& action) {
    const int64_t before = allocator_.allocated();
    allocator_.reset_peak();
    action();
    return {allocator_.peak() - before, allocator_.allocated() - before};
  }

  // F of cell k: the input message arrives (a fresh copy, as the transport's), then the
  // action runs: stage 0 copies its micro-batch to the device, the cell records or
  // checkpoints, the output leaves (dropped) or the loss stays with its gradient seed.
  ActionBytes forward(int k, CellMode mode) {
    // The message as it arrives (16-bit under a policy) and the portals popped here.
    auto [in, portals] = is_first_ ? std::pair(input_, nn::Tensors{})
                                   : split_off(copies(input_), portals_in_);
    if (!is_first_) in = narrow_message(std::move(in), precision_);
    input_portal_bytes_ = bytes_of(portals);
    input_message_bytes_ = is_first_ ? 0 : bytes_of(in) + input_portal_bytes_;
    return measure([&] {
      // A checkpointed cell keeps the message as it arrived (Note [16-bit checkpoints]).
      nn::Tensors arrived;
      if (!is_first_ && mode == CellMode::kCheckpoint) arrived = in;
      nn::Tensors args = is_first_ ? std::move(in) : widen_message(std::move(in), precision_);
      args.insert(args.end(), portals.begin(), portals.end());
      portals.clear();
      if (is_first_) {
        for (Tensor& t : args) t = t.to(device_);
      }
      nn::Tensors out = cells_[k].forward(fns_[k], args, mode, current_generator(),
                                          is_first_ ? needs_grad_ : std::vector<char>{},
                                          arrived);
      arrived.clear();
      args.clear();
      if (loss_) {
        loss_->made(k, out.at(0), /*with_backward=*/true);
      } else {
        // Only the outputs' shapes are kept: a reference would hold the last output past
        // its cell's backward, which the runtime's send does not.
        output_like_.clear();
        for (const Tensor& t : out) {
          output_like_.push_back(
              {t.defined() && is_floating(t.dtype()), t.defined() ? t.shape() : Shape{},
               t.defined() ? t.dtype() : DType::kFloat32});
        }
        // Sent: the portals stashed here as they are, then the output, narrowed.
        auto [sent, stashed] = split_off(std::move(out), portals_out_);
        sent = narrow_message(std::move(sent), precision_);
        output_bytes_ = bytes_of(sent) + bytes_of(stashed);
      }
    });
  }

  ActionBytes recompute(int k) {
    return measure([&] { cells_[k].recompute(fns_[k], current_generator()); });
  }

  // B or I of cell k: the gradient message arrives, the cell backpropagates, its input
  // gradient leaves (dropped).
  ActionBytes backward(int k, bool split) {
    nn::Tensors grads, portal_grads;
    if (loss_) {
      grads = {loss_->take_grad(k)};
    } else {
      for (const OutputShape& o : output_like_) {
        grads.push_back(o.floating ? Tensor::ones(o.shape, {o.dtype, device_}) : Tensor());
      }
      // The output's gradient arrives narrowed, the portals' as they are.
      std::tie(grads, portal_grads) = split_off(std::move(grads), portals_out_);
      grads = narrow_message(std::move(grads), precision_);
      grad_portal_bytes_ = bytes_of(portal_grads);
      grad_message_bytes_ = bytes_of(grads) + grad_portal_bytes_;
    }
    return measure([&] {
      nn::Tensors g = loss_ ? std::move(grads) : widen_message(std::move(grads), precision_);
      g.insert(g.end(), portal_grads.begin(), portal_grads.end());
      portal_grads.clear();
      nn::Tensors sent = split ? cells_[k].backward_input(g) : cells_[k].backward(g);
      if (!is_first_) {
        auto [input_grads, to_portals] = split_off(std::move(sent), portals_in_);
        input_grads = narrow_message(std::move(input_grads), precision_);
        grad_input_bytes_ = bytes_of(input_grads) + bytes_of(to_portals);
      }
    });
  }

  ActionBytes weight(int k) {
    return measure([&] { cells_[k].backward_weight(); });
  }

  // The step's end: loss values and deferred sums go, the next series starts from no .grad.
  void end_series(DeferredBatchNorm* deferred) {
    for (int k = 0; loss_ && k < 2; ++k) {
      loss_->value(k) = Tensor();
      loss_->take_grad(k);  // dropped (every series runs each backward, which took it)
    }
    if (deferred != nullptr) deferred->discard();
    for (Tensor p : stage_.parameters()) p.set_grad(Tensor());
    working_copies_.clear();
  }

  int64_t input_message_bytes_ = 0, output_bytes_ = 0, grad_message_bytes_ = 0,
          grad_input_bytes_ = 0;
  int64_t input_portal_bytes_ = 0, grad_portal_bytes_ = 0;  // of the two arriving messages

 private:
  // (tensors without their last `n`, those last n).
  static std::pair<nn::Tensors, nn::Tensors> split_off(nn::Tensors tensors, size_t n) {
    nn::Tensors last(std::make_move_iterator(tensors.end() - static_cast<std::ptrdiff_t>(n)),
                     std::make_move_iterator(tensors.end()));
    tensors.resize(tensors.size() - n);
    return {std::move(tensors), std::move(last)};
  }

  static nn::Tensors copies(const nn::Tensors& tensors) {
    nn::Tensors out;
    for (const Tensor& t : tensors) out.push_back(t.defined() ? t.clone() : t);
    return out;
  }

  nn::Sequential& stage_;
  Device device_;
  Allocator& allocator_;
  nn::Tensors input_;
  bool is_first_;
  autograd::Precision precision_;
  size_t portals_in_, portals_out_;       // the skips popped here, stashed here for later
  autograd::WorkingCopies working_copies_;  // the stage's, for one series (a step's)
  nn::Arguments arguments_;
  std::optional<StepLoss> loss_;  // the last stage's
  nn::Tensors unkept_outputs_;    // StepLoss keeps no outputs here
  StageFn fns_[2];                // micro-batch k's stage function
  std::vector<char> needs_grad_;
  Cell cells_[2];
  struct OutputShape {
    bool floating;  // defined and floating: it receives a gradient
    Shape shape;
    DType dtype;
  };
  std::vector<OutputShape> output_like_;
};

}  // namespace

StageMemory probe_stage(nn::Sequential& model, int first, int last, int64_t rows,
                        const Tensor& input, const Tensor& target, const LossFn& loss_fn,
                        const ProbeOptions& options) {
  const int n = static_cast<int>(model.size());
  if (first < 0 || last > n || first >= last) {
    throw std::invalid_argument("probe_stage: layers [" + std::to_string(first) + ", " +
                                std::to_string(last) + ") of a model of " + std::to_string(n) +
                                " layers");
  }
  if (!input.defined() || input.dim() == 0 || rows < 1 || rows > input.size(0)) {
    throw std::invalid_argument("probe_stage: rows " + std::to_string(rows) +
                                " outside the sample's [1, N]");
  }
  const auto [layout, s] = probe_layout(model, first, last);
  const Device device = profile_device(model, input);
  const bool is_first = first == 0, is_last = last == n;

  StageMemory m;
  m.first = first;
  m.last = last;
  m.is_first = is_first;
  m.is_last = is_last;
  m.rows = rows;
  m.exact = true;

  ProfileStateGuard state(model);
  nn::Sequential stage = model.slice(static_cast<size_t>(first), static_cast<size_t>(last));
  for (const Tensor& p : stage.parameters()) {
    if (p.requires_grad()) m.parameter_bytes += static_cast<int64_t>(p.nbytes());
  }
  for (const auto& [name, b] : stage.named_buffers()) m.buffer_bytes += static_cast<int64_t>(b.nbytes());
  // The stage's input: stage 0's micro-batch (copied in F; from another device, as a data
  // loader's batch is), or the earlier layers' output and the portals they stash for this
  // stage, computed without a graph.
  Tensor batch = input.slice(0, rows);
  nn::Tensors stage_input;
  if (is_first) {
    if (batch.device() == device) batch = batch.to(Device::cpu(device.is_cpu() ? device.index + 1 : 0));
    stage_input = {batch};
  } else {
    autograd::NoGradGuard no_grad;
    nn::Sequential before = model.slice(0, static_cast<size_t>(first));
    const nn::Arguments none;
    stage_input = stage_function(before, device, layout, 0, 0, none, {})({batch.to(device)});
  }
  nn::Tensors targets;
  if (is_last) {
    targets = {target.slice(0, rows).to(device)};
    m.target_bytes = bytes_of(targets);
  }
  std::unique_ptr<DeferredBatchNorm> deferred;
  if (options.deferred_batch_norm) deferred = std::make_unique<DeferredBatchNorm>(stage);

  {  // recorded cells, whole backwards
    Probe probe(stage, device, layout, s, stage_input, is_first, is_last, loss_fn, targets,
                rows, options.precision);
    m.forward_first = probe.forward(0, CellMode::kRecord);
    m.forward = probe.forward(1, CellMode::kRecord);
    m.backward_first = probe.backward(0, false);
    m.backward = probe.backward(1, false);
    probe.end_series(deferred.get());
    m.input_bytes = probe.input_message_bytes_;
    m.output_bytes = probe.output_bytes_;
    m.grad_output_bytes = probe.grad_message_bytes_;
    m.grad_input_bytes = probe.grad_input_bytes_;
    m.input_portal_bytes = probe.input_portal_bytes_;
    m.grad_output_portal_bytes = probe.grad_portal_bytes_;
  }
  {  // checkpointed cells
    Probe probe(stage, device, layout, s, stage_input, is_first, is_last, loss_fn, targets,
                rows, options.precision);
    m.checkpoint_first = probe.forward(0, CellMode::kCheckpoint);
    m.checkpoint = probe.forward(1, CellMode::kCheckpoint);
    m.recompute = probe.recompute(0);
    probe.backward(0, false);
    probe.recompute(1);
    probe.backward(1, false);
    probe.end_series(deferred.get());
  }
  {  // split backwards
    Probe probe(stage, device, layout, s, stage_input, is_first, is_last, loss_fn, targets,
                rows, options.precision);
    probe.forward(0, CellMode::kRecord);
    probe.forward(1, CellMode::kRecord);
    m.backward_input_first = probe.backward(0, true);
    m.weight_first = probe.weight(0);
    m.backward_input = probe.backward(1, true);
    m.weight = probe.weight(1);
    probe.end_series(deferred.get());
  }
  return m;
}

}  // namespace pipewright::pipeline
