#include "pipeline/profile_state.h"

#include "nn/batch_norm.h"

namespace pipewright::pipeline {

ProfileStateGuard::ProfileStateGuard(nn::Module& module)
    : generator_(current_generator().seed(), current_generator().offset()),
      generator_guard_(generator_),
      grad_mode_(autograd::grad_mode_enabled()),
      checkpoint_flags_(/*checkpointing=*/false, /*recomputing=*/false) {
  for (auto& [name, t] : module.named_buffers()) buffers_.emplace_back(t, t.clone());
  for (Tensor& p : module.parameters()) {
    grads_.emplace_back(p, p.grad());
    p.set_grad(Tensor());
  }
  record_modes(module);
  autograd::set_grad_mode_enabled(true);
  module.train(true);
}

ProfileStateGuard::~ProfileStateGuard() {
  for (auto& [live, saved] : buffers_) live.copy_from(saved);
  for (auto& [p, grad] : grads_) p.set_grad(grad);
  // Pre-order: a parent's train() sets its children, which are then set to their own flag.
  for (auto& [m, on] : modes_) m->train(on);
  for (nn::BatchNorm1d* bn : deferred_) bn->set_deferred(true);
  autograd::set_grad_mode_enabled(grad_mode_);
}

void ProfileStateGuard::record_modes(nn::Module& m) {
  modes_.emplace_back(&m, m.is_training());
  if (auto* bn = dynamic_cast<nn::BatchNorm1d*>(&m); bn != nullptr && bn->is_deferred()) {
    bn->set_deferred(false);  // profile as plain BatchNorm; its accumulated sums stay
    deferred_.push_back(bn);
  }
  for (auto& [name, child] : m.children()) record_modes(*child);
}

nn::Tensors detach_like(const nn::Tensors& outputs) {
  nn::Tensors out;
  out.reserve(outputs.size());
  for (const Tensor& t : outputs) {
    const bool requires_grad = t.requires_grad();
    Tensor d = t.detach();
    d.set_requires_grad(requires_grad);
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace pipewright::pipeline
