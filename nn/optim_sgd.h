// SGD: stochastic gradient descent with optional momentum, dampening, Nesterov momentum and
// L2 weight decay, exactly torch.optim.SGD (https://pytorch.org/docs/stable/generated/torch.optim.SGD.html).
//
// Per parameter p with gradient g, learning rate γ, weight decay λ, momentum μ, dampening τ:
//
//   g ← g + λ p                                  (if λ ≠ 0)
//   if μ ≠ 0:
//     b ← g                       on the first step of this parameter
//     b ← μ b + (1 − τ) g         afterwards
//     g ← g + μ b  (Nesterov)   or   g ← b
//   p ← p − γ g
//
// The momentum buffer b is the per-parameter state ("state.<i>.momentum_buffer"); with μ = 0
// there is none. Computed by the fused multi-tensor kernel Kernels::sgd_step_multi of the
// parameters' device, with sgd_step's bits.
#pragma once

#include <vector>

#include "nn/optimizer.h"

namespace pipewright::nn {

struct SGDOptions {
  double lr = 1e-3;            // γ, >= 0 (PyTorch's default since 2.2)
  double momentum = 0.0;       // μ, >= 0
  double dampening = 0.0;      // τ, finite
  double weight_decay = 0.0;   // λ, >= 0
  bool nesterov = false;       // needs μ > 0 and τ = 0
};

class SGD : public Optimizer {
 public:
  /// Throws std::invalid_argument naming the value for lr < 0, momentum < 0, weight_decay < 0,
  /// a non-finite dampening, or nesterov without (momentum > 0 and dampening = 0); and
  /// everything Optimizer's constructor throws.
  SGD(std::vector<Tensor> params, SGDOptions options);

  /// Inside a graph capture on the parameter's device (tensor/graph.h) the update reads the
  /// learning rate from a slot every replay refills; throws std::logic_error there for a
  /// parameter whose momentum buffer does not exist yet.
  void update(size_t i, const Tensor& grad) override;
  /// A device's parameters that share dtype and whether their momentum buffer is made now in
  /// one multi-tensor kernel call (Kernels::sgd_step_multi); bitwise what update() per
  /// parameter gives.
  void update_many(const std::vector<size_t>& indices, const std::vector<Tensor>& grads) override;
  bool capturable() const override { return true; }
  double lr() const override { return options_.lr; }
  void set_lr(double lr) override;
  const char* name() const override { return "SGD"; }
  const SGDOptions& options() const { return options_; }

 protected:
  std::vector<std::string> state_names() const override;
  NamedTensors param_state(size_t i) const override;
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  void validate_hyperparameters(const std::map<std::string, double>& values) const override;
  void commit_state(std::vector<std::map<std::string, Tensor>> per_param,
                    const std::map<std::string, double>& hyperparameters) override;

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_buffers_;  // per parameter; undefined until its first step
};

}  // namespace pipewright::nn
