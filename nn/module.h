// Module: the base of every layer, with PyTorch's conventions.
//
// A module owns parameters (leaf tensors with requires_grad), buffers (running statistics)
// and child modules, each registered under a name; nested names are dotted like PyTorch's
// state_dict keys ("0.weight", "3.running_var"). Registered tensors are handles to the same
// TensorImpl as the subclass's members, so load_state_dict() and to() change data in place
// and every handle sees it.
//
// Forward takes a list of tensors (a "tuple" in torchgpipe's terms) and returns a list; the
// common single-tensor case overrides forward(const Tensor&) and inherits the list version.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/tensors.h"
#include "tensor/tensor.h"

namespace pipewright::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  /// A moved-from module is marked so: its forward (operator(), Sequential::forward, the
  /// layers'), parameters, buffers, state dicts, to() and train() throw std::logic_error
  /// naming it, instead of running on emptied members.
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;

  /// Single-tensor forward. The default throws std::logic_error naming the module: override
  /// this or forward(const Tensors&).
  virtual Tensor forward(const Tensor& input);
  /// List forward. The default requires exactly one input (else std::invalid_argument naming
  /// the count) and calls forward(const Tensor&).
  virtual Tensors forward(const Tensors& inputs);
  Tensor operator()(const Tensor& input) {
    check_not_moved_from();
    return forward(input);
  }
  Tensors operator()(const Tensors& inputs) {
    check_not_moved_from();
    return forward(inputs);
  }

  /// "Linear(in_features=784, out_features=1024, bias=true)".
  virtual std::string str() const = 0;

  /// Parameters/buffers of this module and its children, recursively, in registration order,
  /// with dotted names.
  NamedTensors named_parameters() const;
  NamedTensors named_buffers() const;
  Tensors parameters() const;
  /// PyTorch's state_dict order and keys: each module's parameters, then its buffers, then
  /// its children's entries, depth first ("0.weight", "0.bias", "1.weight", ...,
  /// "1.running_mean", "1.running_var", "1.num_batches_tracked").
  NamedTensors state_dict() const;
  /// Copies every tensor of `state` into the matching parameter/buffer (in place, converting
  /// device, and floating dtype: a bfloat16 or float64 entry loads into a float32 tensor as
  /// PyTorch's copy_ converts it). Throws std::invalid_argument listing missing and unexpected
  /// keys, or naming a key whose shape differs or whose dtype is int64 on one side only
  /// (expected vs got).
  void load_state_dict(const NamedTensors& state);

  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const {
    return children_;
  }

  /// Throws std::logic_error "<str()> was moved from (std::move): use the module it was
  /// moved into" when this module was moved from.
  void check_not_moved_from() const;

  /// Training mode (BatchNorm batch statistics, Dropout active) for this module and children.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Moves every parameter and buffer (and parameter .grad) to `device` in place: each
  /// TensorImpl keeps its identity and gets a copy of its data on `device` (its old storage
  /// is released when no other view holds it). Not thread-safe against concurrent use.
  void to(Device device);
  /// Sets every parameter's .grad to undefined (PyTorch's set_to_none=True).
  void zero_grad();

 protected:
  /// Registers `t` (a defined leaf) as a parameter (sets requires_grad) and returns it.
  /// Throws std::invalid_argument for an undefined or non-leaf tensor or a name in use.
  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    check_new_name(name);
    children_.emplace_back(name, module);
    return module;
  }
  /// Sets this module's own training flag only (not its children's).
  void set_training_flag(bool on) { training_ = on; }

 private:
  enum class Kind { kParameters, kBuffers, kState };
  void collect(const std::string& prefix, Kind kind, NamedTensors& out) const;
  /// Throws std::invalid_argument when `name` is empty, dotted or already registered.
  void check_new_name(const std::string& name) const;

  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  bool moved_from_ = false;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace pipewright::nn
