#include "pipeline/cell.h"

#include <optional>
#include <stdexcept>

#include "autograd/grad_mode.h"

namespace pipewright::pipeline {
namespace {

/// Restores a generator's state when leaving a scope, exceptions included.
class RngStateGuard {
 public:
  explicit RngStateGuard(Generator& rng) : rng_(rng), seed_(rng.seed()), offset_(rng.offset()) {}
  ~RngStateGuard() { rng_.set_state(seed_, offset_); }
  RngStateGuard(const RngStateGuard&) = delete;
  RngStateGuard& operator=(const RngStateGuard&) = delete;

 private:
  Generator& rng_;
  uint64_t seed_;
  uint64_t offset_;
};

nn::Tensors detached(const nn::Tensors& tensors) {
  nn::Tensors out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) out.push_back(t.defined() ? t.detach() : Tensor());
  return out;
}

}  // namespace

nn::Tensors Cell::forward(const StageFn& fn, const nn::Tensors& inputs, CellMode mode,
                          Generator& rng, const std::vector<char>& needs_grad,
                          const nn::Tensors& arrived) {
  if (arrived.size() > inputs.size()) {
    throw std::invalid_argument("Cell::forward: " + std::to_string(arrived.size()) +
                                " arrived tensors for " + std::to_string(inputs.size()) +
                                " inputs");
  }
  reset();
  mode_ = mode;
  inputs_ = detached(inputs);
  if (mode == CellMode::kNoGrad) {
    autograd::NoGradGuard no_grad;
    nn::Tensors outputs = fn(inputs_);
    inputs_.clear();
    return outputs;
  }
  for (size_t i = 0; i < inputs_.size(); ++i) {
    Tensor& t = inputs_[i];
    const bool wanted = needs_grad.empty() || (i < needs_grad.size() && needs_grad[i]);
    if (wanted && t.defined() && is_floating(t.dtype())) t.set_requires_grad(true);
  }
  if (mode == CellMode::kCheckpoint) {
    seed_ = rng.seed();
    offset_ = rng.offset();
    autograd::NoGradGuard no_grad;
    nn::Tensors outputs;
    {
      autograd::CheckpointModeGuard checkpointing(/*checkpointing=*/true,
                                                  /*recomputing=*/false);
      outputs = detached(fn(inputs_));
    }
    keep_arrived(arrived);
    return outputs;
  }
  outputs_ = fn(inputs_);
  has_graph_ = true;
  return detached(outputs_);
}

void Cell::recompute(const StageFn& fn, Generator& rng) {
  if (mode_ != CellMode::kCheckpoint || recomputed_) {
    throw std::logic_error(recomputed_ ? "recompute of a cell that was already recomputed"
                                       : "recompute of a cell that was not checkpointed");
  }
  // Note [16-bit checkpoints]: the kept 16-bit message widened again, the same float32 values.
  for (size_t i = 0; i < widen_in_recompute_.size(); ++i) {
    Tensor& t = inputs_[i];
    if (widen_in_recompute_[i]) t = t.to(DType::kFloat32);
    if (leaf_in_recompute_[i]) t.set_requires_grad(true);
  }
  widen_in_recompute_.clear();
  leaf_in_recompute_.clear();
  RngStateGuard restore(rng);
  rng.set_state(seed_, offset_);
  autograd::CheckpointModeGuard recomputing(/*checkpointing=*/false, /*recomputing=*/true);
  outputs_ = fn(inputs_);
  has_graph_ = true;
  recomputed_ = true;
}

void Cell::keep_arrived(const nn::Tensors& arrived) {
  widen_in_recompute_.assign(arrived.size(), 0);
  leaf_in_recompute_.assign(arrived.size(), 0);
  for (size_t i = 0; i < arrived.size(); ++i) {
    const Tensor& kept = arrived[i];
    Tensor& input = inputs_[i];
    if (!kept.defined() || !input.defined() || kept.dtype() == input.dtype()) continue;
    if (input.dtype() != DType::kFloat32 || !is_floating(kept.dtype()) ||
        kept.shape() != input.shape()) {
      throw std::invalid_argument("Cell::forward: arrived tensor " + std::to_string(i) + " (" +
                                  std::string(dtype_name(kept.dtype())) + ", " +
                                  kept.shape().str() + ") is not the 16-bit form of input " +
                                  std::to_string(i) + " (" +
                                  std::string(dtype_name(input.dtype())) + ", " +
                                  input.shape().str() + ")");
    }
    widen_in_recompute_[i] = 1;
    leaf_in_recompute_[i] = input.requires_grad() ? 1 : 0;
    input = kept.detach();
  }
}

nn::Tensors Cell::backward(const nn::Tensors& grad_outputs) {
  return backward_impl(grad_outputs, nullptr);
}

nn::Tensors Cell::backward_input(const nn::Tensors& grad_outputs) {
  return backward_impl(grad_outputs, &weight_grads_);
}

void Cell::backward_weight() {
  weight_grads_.run();
  if (!retain_graph_) reset();
}

nn::Tensors Cell::backward_impl(const nn::Tensors& grad_outputs,
                                autograd::WeightGradQueue* defer) {
  if (!has_graph_) {
    throw std::logic_error(mode_ == CellMode::kCheckpoint && !recomputed_
                               ? "backward of a checkpointed cell before its recompute"
                               : "backward of a cell that holds no graph");
  }
  if (grad_outputs.size() != outputs_.size()) {
    throw std::invalid_argument("a stage produced " + std::to_string(outputs_.size()) +
                                " outputs but received " + std::to_string(grad_outputs.size()) +
                                " gradients");
  }
  // Only outputs on the graph that got a gradient take part (one that got none was not used
  // after this stage: plain autograd never reaches it either).
  nn::Tensors outs, grads, ins;
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const Tensor& out = outputs_[k];
    const Tensor& g = grad_outputs[k];
    if (!out.defined() || !out.requires_grad() || !g.defined()) continue;
    outs.push_back(out);
    grads.push_back(g.to(out.device()));
  }
  std::vector<size_t> input_pos;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (inputs_[i].defined() && inputs_[i].requires_grad()) {
      ins.push_back(inputs_[i]);
      input_pos.push_back(i);
    }
  }
  nn::Tensors grad_inputs(inputs_.size());
  if (!outs.empty()) {
    autograd::BackwardOptions options;
    options.defer_weight_grads = defer;
    options.retain_graph = retain_graph_;
    nn::Tensors result = autograd::backward(outs, grads, ins, options);
    for (size_t k = 0; k < input_pos.size() && k < result.size(); ++k) {
      grad_inputs[input_pos[k]] = result[k];
    }
  }
  if (retain_graph_) return grad_inputs;
  has_graph_ = false;
  outputs_.clear();
  inputs_.clear();
  if (defer == nullptr) reset();
  return grad_inputs;
}

bool Cell::gets_no_gradient(const nn::Tensors& grad_outputs) const {
  if (!has_graph_) return false;
  bool on_graph = false;
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const Tensor& out = outputs_[k];
    if (!out.defined() || !out.requires_grad()) continue;
    if (k < grad_outputs.size() && grad_outputs[k].defined()) return false;
    on_graph = true;
  }
  return on_graph;
}

void Cell::reset() {
  mode_ = CellMode::kNoGrad;
  inputs_.clear();
  outputs_.clear();
  has_graph_ = false;
  recomputed_ = false;
  retain_graph_ = false;
  widen_in_recompute_.clear();
  leaf_in_recompute_.clear();
  weight_grads_ = autograd::WeightGradQueue();
}

}  // namespace pipewright::pipeline
