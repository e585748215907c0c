// Adam and AdamW, exactly torch.optim.Adam / torch.optim.AdamW (amsgrad and maximize not
// supported): https://pytorch.org/docs/stable/generated/torch.optim.Adam.html and
// https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html
//
// Per parameter p with gradient g, learning rate γ, betas β1 β2, ε, weight decay λ, and
// t = this parameter's step count after incrementing it (t = 1 on its first step):
//
//   Adam (L2):         g ← g + λ p
//   AdamW (decoupled): p ← p (1 − γ λ)
//   m ← β1 m + (1 − β1) g                 (m, v start at zero)
//   v ← β2 v + (1 − β2) g²
//   p ← p − γ · (m / (1 − β1ᵗ)) / (√(v / (1 − β2ᵗ)) + ε)
//
// Per-parameter state: "state.<i>.step" (int64), "state.<i>.exp_avg" (m) and
// "state.<i>.exp_avg_sq" (v). Computed by the fused multi-tensor kernel
// Kernels::adam_step_multi of the parameters' device, with adam_step's bits.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "nn/optimizer.h"

namespace pipewright {
class DeviceGraph;
struct AdamTensors;  // tensor/kernels.h
}  // namespace pipewright

namespace pipewright::nn {

struct AdamOptions {
  double lr = 1e-3;                                  // γ, >= 0
  std::pair<double, double> betas = {0.9, 0.999};    // β1, β2, each in [0, 1)
  double eps = 1e-8;                                 // ε, >= 0
  double weight_decay = 0.0;                         // λ, >= 0
  bool decoupled = false;                            // true: AdamW's decoupled weight decay
};

/// AdamW's options: Adam's with decoupled weight decay and λ = 1e-2 by default.
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class Adam : public Optimizer {
 public:
  /// Throws std::invalid_argument naming the value for lr < 0, a beta outside [0, 1), eps < 0
  /// or weight_decay < 0 (NaN included); and everything Optimizer's constructor throws.
  Adam(std::vector<Tensor> params, AdamOptions options);
  /// Parameter groups (torch's param_groups): group g's parameters decay by its weight_decay
  /// (options.weight_decay where it has none); every other hyperparameter is shared.
  /// Parameters are numbered across the groups in order. options().weight_decay is group 0's.
  /// Throws as above, also for a group's weight_decay < 0.
  Adam(std::vector<ParamGroup> groups, AdamOptions options);

  /// Inside a graph capture on the parameter's device (tensor/graph.h) the update reads its
  /// step's lr and bias corrections from a slot every replay refills, and `step` advances at
  /// each replay's commit instead of now; throws std::logic_error there for a parameter that
  /// has never stepped (its zeroed state would be captured).
  void update(size_t i, const Tensor& grad) override;
  /// A device's parameters that share dtype, weight decay and step count in one multi-tensor
  /// kernel call (Note [One launch per bucket], nn/optim_adam.cc); bitwise what update() per
  /// parameter gives.
  void update_many(const std::vector<size_t>& indices, const std::vector<Tensor>& grads) override;
  double lr() const override { return options_.lr; }
  bool capturable() const override { return true; }
  std::vector<const void*> state_addresses() const override;
  void set_lr(double lr) override;
  const char* name() const override { return options_.decoupled ? "AdamW" : "Adam"; }
  const AdamOptions& options() const { return options_; }

 protected:
  std::vector<std::string> state_names() const override;
  NamedTensors param_state(size_t i) const override;
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  void validate_hyperparameters(const std::map<std::string, double>& values) const override;
  void commit_state(std::vector<std::map<std::string, Tensor>> per_param,
                    const std::map<std::string, double>& hyperparameters) override;

 private:
  struct State {
    int64_t step = 0;   // 0: never stepped (no state)
    Tensor exp_avg;     // m
    Tensor exp_avg_sq;  // v
  };
  void update_replayed(DeviceGraph& graph, const std::vector<size_t>& members,
                       const std::vector<AdamTensors>& tensors, double decay);
  AdamOptions options_;
  std::vector<State> state_;
  std::vector<int64_t> group_sizes_;    // parameters per group, in order
  std::vector<double> group_decay_;     // λ of each group (group 0's is options_.weight_decay)
};

/// Adam with decoupled weight decay (Loshchilov & Hutter, "Decoupled Weight Decay
/// Regularization"); the same as Adam with AdamOptions::decoupled = true.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options);
  /// With parameter groups, e.g. no decay on biases and norms:
  ///   nn::AdamW opt(nn::weight_decay_groups(model.parameters(), 0.1), {.lr = 3e-4});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options);
};

}  // namespace pipewright::nn
