// Optimizer: the base of SGD, Adam and AdamW (torch.optim.Optimizer, one parameter group).
//
// An optimizer holds handles to the parameters it updates (the same TensorImpls as the
// model's, so an update is visible through every handle) and, per parameter, its state
// (momentum buffer, Adam moments, step count). step() reads each parameter's .grad and updates
// the parameter in place with the fused kernel of the parameter's device (Kernels::sgd_step /
// Kernels::adam_step), so parameters of different pipeline stages may live on different
// devices; each state tensor lives on its parameter's device.
//
//   nn::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
//   for (...) { opt.zero_grad(); loss(model(x), y).backward(); opt.step(); }
//
// Checkpointing: state_dict() / load_state_dict() use flat, PyTorch-like keys, so a training
// run saved to safetensors resumes bit for bit (see nn/serialize.h):
//
//   state.<i>.<name>        per-parameter state of parameter i (its index in the constructor's
//                           list), e.g. "state.0.momentum_buffer", "state.3.exp_avg",
//                           "state.3.exp_avg_sq", "state.3.step". A parameter that has never
//                           been stepped (its grad was always undefined) has no entries.
//                           By convention (PyTorch's), an entry named "step" is a count;
//                           every other entry has its parameter's shape and dtype.
//   param_groups.0.<name>   the hyperparameters as float64 scalars ("param_groups.0.lr"; a
//                           flag like nesterov is 0 or 1). Loading restores them, as PyTorch
//                           does, so a learning-rate schedule resumes where it stopped.
//   param_groups.<g>.<name> with several parameter groups (ParamGroup), what differs per group
//                           g >= 1 ("param_groups.1.weight_decay") and each group's size
//                           ("param_groups.<g>.num_params"); parameters are numbered across the
//                           groups in order, as in PyTorch.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace pipewright::nn {

// The same alias as nn/module.h declares (redeclaring an alias of the same type is legal C++),
// so the optimizers do not depend on Module.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// One of torch.optim's param_groups: parameters that share a setting. weight_decay
/// overrides the optimizer's (nullopt: the optimizer's). Adam and AdamW take a list of groups.
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> weight_decay = std::nullopt;
};

/// nanoGPT's split for AdamW: parameters of rank >= 2 (Linear and Embedding weights) decay by
/// `weight_decay`; those of rank < 2 (biases, LayerNorm and RMSNorm weights) do not decay.
/// Returns {decaying, non-decaying}, each in the order of `params` (a group may be empty).
std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params,
                                            double weight_decay);

class Optimizer {
 public:
  /// `params`: the tensors to update (e.g. Module::parameters()), float32 or float64,
  /// contiguous, each at most once. Throws std::invalid_argument for an empty list, an
  /// undefined, integer or non-contiguous tensor, or the same tensor twice (naming its index).
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;
  /// Neither copied nor moved, so there is no moved-from optimizer to misuse (hold one in a
  /// std::unique_ptr<Optimizer> to pass it around).
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter whose .grad is defined (the others are skipped and keep
  /// their state, as in PyTorch). Throws std::invalid_argument when a grad's shape, dtype or
  /// device differs from its parameter's (naming the parameter index and both values).
  /// A parameter that requires grad yet has been stepped over kStepsWithoutGradWarning times
  /// in a row without one is reported once on stderr (Note [A parameter never trained]).
  void step();
  /// The same update for the parameters at `indices` (positions in params(), each at most
  /// once) and no others: one part of a step, e.g. a pipeline stage's (Pipe::step runs each
  /// stage's part on that stage's worker). Each parameter's update reads only its own grad and
  /// state, so the parts of one step, run in any order or at once on different threads for
  /// disjoint index sets, equal step(). Throws std::out_of_range for an index past params(),
  /// std::invalid_argument for an index listed twice, and what step() throws (checked for
  /// these parameters before any changes).
  void step(const std::vector<size_t>& indices);
  /// Throws what step() would throw for a grad that does not match its parameter, and
  /// changes nothing: to check every grad before applying a step in parts.
  void check_grads() const { (void)checked_grads(); }

  /// Whether update() may run inside a graph capture (tensor/graph.h): its per-step values
  /// (step count, learning rate) read from per-replay slots rather than baked into the
  /// kernels (Note [Per-replay scalars]). Adam, AdamW and SGD: yes.
  virtual bool capturable() const { return false; }

  /// Where each per-parameter state tensor on a device other than the CPU keeps its data, in
  /// order (what a captured graph reads; a load_state_dict or a parameter's first step moves
  /// them). No copies are made. Default: from param_state(); Adam skips its per-call "step"
  /// tensors (a replayed step asks every step).
  virtual std::vector<const void*> state_addresses() const;

  /// Sets every parameter's .grad to undefined (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();

  const std::vector<Tensor>& params() const { return params_; }

  // Note [A parameter never trained]
  // PyTorch's optimizers skip a parameter whose .grad is None, silently: a layer that an
  // operation without history cut off from the loss (Tensor::reshape where autograd::reshape
  // was meant), or one the model never uses, then stays as initialised while the loss still
  // falls through the other layers. The step cannot tell that from a parameter unused on
  // purpose in a few steps, but a parameter that requires grad and got no gradient in
  // kStepsWithoutGradWarning steps in a row (more than an epoch of the examples' smallest
  // runs) is most likely a mistake: the first one to get there is named on stderr, once per
  // optimizer, with how to freeze a parameter on purpose (requires_grad false: not counted).

  /// Steps in a row without a gradient after which a parameter is reported (see the Note).
  static constexpr int64_t kStepsWithoutGradWarning = 100;
  /// Per parameter (params() order): the steps in a row, up to now, in which step() went
  /// over it (step(indices): only the listed ones) while it required grad and had none.
  const std::vector<int64_t>& steps_without_grad() const { return steps_without_grad_; }

  /// The learning rate (what a schedule changes between steps). set_lr throws
  /// std::invalid_argument for lr < 0 or NaN.
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;

  /// "SGD", "Adam", "AdamW": used in error messages.
  virtual const char* name() const = 0;

  /// A snapshot of the state (copies: later steps do not change it), keys as described at the
  /// top of this file. Per-parameter tensors stay on their parameter's device; "step" is a
  /// rank-0 int64 tensor on the CPU; hyperparameters are rank-0 float64 tensors on the CPU.
  NamedTensors state_dict() const;

  /// Restores a state_dict() (from this optimizer class, over parameters of the same shapes
  /// and dtypes, any device: tensors are copied to each parameter's device). Throws
  /// std::invalid_argument naming the key for: an unknown or malformed key, a parameter
  /// index out of range, a missing hyperparameter, an incomplete per-parameter state (say
  /// exp_avg without exp_avg_sq), a shape/dtype that differs from the parameter's, a step < 1,
  /// or invalid hyperparameters. On error the optimizer is left unchanged.
  void load_state_dict(const NamedTensors& state);

 protected:
  // ---- what a concrete optimizer supplies ----

  /// Updates parameter i from `grad` (defined, checked to match it), and its state.
  virtual void update(size_t i, const Tensor& grad) = 0;
  /// Updates the parameters at `indices` (distinct) from `grads` (as many, each defined and
  /// checked to match): what step() and step(indices) call once per call. Default: update()
  /// for each in order; Adam and SGD update a device's parameters in few launches (Note
  /// [Tensor lists], cuda_kernels/optim.cu), each with the bits update() gives it.
  virtual void update_many(const std::vector<size_t>& indices, const std::vector<Tensor>& grads);

  /// Names of the per-parameter state entries ("momentum_buffer"; "step", "exp_avg", ...).
  /// A parameter either has all of them or none.
  virtual std::vector<std::string> state_names() const = 0;
  /// Parameter i's state as (name, tensor) in state_names() order, or empty when it has none.
  /// The tensors may be the live ones: state_dict() copies them.
  virtual NamedTensors param_state(size_t i) const = 0;
  /// Hyperparameters as (name, value): "lr" is group 0's, "1.weight_decay" group 1's.
  virtual std::vector<std::pair<std::string, double>> hyperparameters() const = 0;

  /// Throws std::invalid_argument (naming the values) when loaded hyperparameters are invalid.
  /// `values` holds every name of hyperparameters().
  virtual void validate_hyperparameters(const std::map<std::string, double>& values) const = 0;
  /// Replaces the whole state with one that load_state_dict() has validated: per_param[i] is
  /// empty or holds every state name; an entry named "step" is a rank-0 int64 CPU tensor >= 1,
  /// every other entry a fresh tensor of parameter i's shape and dtype on its device.
  virtual void commit_state(std::vector<std::map<std::string, Tensor>> per_param,
                            const std::map<std::string, double>& hyperparameters) = 0;

  // ---- helpers for subclasses ----

  /// Every parameter's grad, contiguous, checked to match the parameter's shape, dtype and
  /// device (undefined for a parameter with no grad). All are checked before step() changes
  /// anything, so a mismatch throws with every parameter as it was.
  std::vector<Tensor> checked_grads() const;
  /// Positions 0 .. count - 1 in the groups that `same` (an equivalence) makes, each group in
  /// order and the groups in order of first appearance: the buckets of a multi-tensor update
  /// (Note [One launch per bucket], nn/optim_adam.cc).
  static std::vector<std::vector<size_t>> buckets(
      size_t count, const std::function<bool(size_t, size_t)>& same);
  /// The rank-0 int64 CPU tensor holding `step` (for param_state()).
  static Tensor step_tensor(int64_t step);
  /// `t` on parameter i's device (no copy when already there): state follows a parameter that
  /// Module::to() moved.
  Tensor on_param_device(size_t i, const Tensor& t) const;

 private:
  /// Parameter i's grad, checked as checked_grads() says.
  Tensor checked_grad(size_t i) const;
  /// A fresh copy of `t` on parameter i's device, after checking it has the parameter's shape
  /// and dtype (the key is named in the error).
  Tensor state_like_param(size_t i, const std::string& key, const Tensor& t) const;
  /// The value of a loaded step count: a one-element int64 tensor holding a value >= 1.
  static int64_t step_value(const std::string& key, const Tensor& t);

  /// Counts a step over parameter i without a grad, and reports it once when it reaches
  /// kStepsWithoutGradWarning (the Note). Safe from threads stepping disjoint parameters.
  void count_step_without_grad(size_t i);

  std::vector<Tensor> params_;
  std::vector<int64_t> steps_without_grad_;
  std::atomic<bool> reported_without_grad_{false};
};

}  // namespace pipewright::nn
