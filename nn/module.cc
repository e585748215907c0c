// Module: registration, recursive traversal with dotted names, state_dict loading, train/eval,
// device moves and zero_grad.
#include "nn/module.h"

#include <map>
#include <ostream>
#include <stdexcept>
#include <unordered_set>

namespace pipewright::nn {
namespace {

std::string join_names(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", \"" : "\"") + names[i] + "\"";
  return out + "]";
}

/// Points impl at a copy of its data on `device` (same TensorImpl, new storage).
void move_impl(TensorImpl& impl, Device device) {
  if (impl.storage->device() == device) return;
  Tensor moved = Tensor(std::shared_ptr<TensorImpl>(std::shared_ptr<TensorImpl>(), &impl))
                     .contiguous()
                     .to(device);
  impl.storage = moved.storage();
  impl.strides = moved.strides();
  impl.offset = moved.offset();
}

}  // namespace

Module::Module(Module&& other) noexcept
    : parameters_(std::move(other.parameters_)),
      buffers_(std::move(other.buffers_)),
      children_(std::move(other.children_)),
      training_(other.training_),
      moved_from_(other.moved_from_) {
  other.moved_from_ = true;
}

Module& Module::operator=(Module&& other) noexcept {
  if (this == &other) return *this;
  parameters_ = std::move(other.parameters_);
  buffers_ = std::move(other.buffers_);
  children_ = std::move(other.children_);
  training_ = other.training_;
  moved_from_ = other.moved_from_;
  other.moved_from_ = true;
  return *this;
}

void Module::check_not_moved_from() const {
  if (moved_from_) {
    throw std::logic_error(str() + " was moved from (std::move): use the module it was moved "
                           "into");
  }
}

Tensor Module::forward(const Tensor& input) {
  throw std::logic_error(str() + ": forward(const Tensor&) is not implemented; override it or "
                         "forward(const Tensors&)");
}

Tensors Module::forward(const Tensors& inputs) {
  if (inputs.size() != 1) {
    throw std::invalid_argument(str() + ": expected 1 input tensor, got " +
                                std::to_string(inputs.size()));
  }
  return {forward(inputs[0])};
}

void Module::collect(const std::string& prefix, Kind kind, NamedTensors& out) const {
  check_not_moved_from();
  if (kind != Kind::kBuffers) {
    for (const auto& [name, t] : parameters_) out.emplace_back(prefix + name, t);
  }
  if (kind != Kind::kParameters) {
    for (const auto& [name, t] : buffers_) out.emplace_back(prefix + name, t);
  }
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", kind, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", Kind::kParameters, out);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", Kind::kBuffers, out);
  return out;
}

Tensors Module::parameters() const {
  Tensors out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect("", Kind::kState, out);
  return out;
}

void Module::load_state_dict(const NamedTensors& state) {
  const NamedTensors own = state_dict();
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state) given[name] = &t;
  std::vector<std::string> missing, unexpected;
  std::unordered_set<std::string> own_names;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    if (given.count(name) == 0) missing.push_back(name);
  }
  for (const auto& [name, t] : given) {
    if (own_names.count(name) == 0) unexpected.push_back(name);
  }
  if (!missing.empty() || !unexpected.empty()) {
    throw std::invalid_argument("load_state_dict of " + str() + ": missing keys " +
                                join_names(missing) + ", unexpected keys " +
                                join_names(unexpected));
  }
  // Check every entry before changing any, so a failed load leaves the module untouched.
  for (const auto& [name, t] : own) {
    const Tensor& src = *given[name];
    if (src.shape() != t.shape()) {
      throw std::invalid_argument("load_state_dict: size mismatch for " + name + ": expected " +
                                  t.shape().str() + ", got " + src.shape().str());
    }
    // Floating values convert (as PyTorch's copy_ does: a bfloat16 checkpoint loads into a
    // float32 model); int64 and floating never mix.
    if (src.dtype() != t.dtype() && !(is_floating(src.dtype()) && is_floating(t.dtype()))) {
      throw std::invalid_argument("load_state_dict: dtype mismatch for " + name + ": expected " +
                                  dtype_name(t.dtype()) + ", got " + dtype_name(src.dtype()));
    }
  }
  for (const auto& [name, t] : own) {
    Tensor dst = t;
    const Tensor& src = *given[name];
    dst.copy_from(src.dtype() == t.dtype() ? src : src.to(t.dtype()));
  }
}

void Module::train(bool on) {
  check_not_moved_from();
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(Device device) {
  std::unordered_set<TensorImpl*> done;  // a tensor shared by two modules moves once
  for (auto& [name, t] : state_dict()) {
    TensorImpl& impl = *t.impl();
    if (!done.insert(&impl).second) continue;
    move_impl(impl, device);
    if (impl.grad != nullptr) move_impl(*impl.grad, device);
  }
}

void Module::zero_grad() {
  for (auto& [name, t] : named_parameters()) t.impl()->grad.reset();
}

void Module::check_new_name(const std::string& name) const {
  auto taken = [&](const auto& list) {
    for (const auto& entry : list) {
      if (entry.first == name) return true;
    }
    return false;
  };
  if (name.empty() || name.find('.') != std::string::npos || taken(parameters_) ||
      taken(buffers_) || taken(children_)) {
    throw std::invalid_argument(str() + ": cannot register \"" + name +
                                "\": the name is empty, contains '.', or is already registered");
  }
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_new_name(name);
  if (!t.defined() || t.grad_fn() != nullptr) {
    throw std::invalid_argument(str() + ": parameter \"" + name +
                                "\" must be a defined leaf tensor");
  }
  t.set_requires_grad(true);
  parameters_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name);
  if (!t.defined()) {
    throw std::invalid_argument(str() + ": buffer \"" + name + "\" is undefined");
  }
  buffers_.emplace_back(name, t);
  return t;
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

}  // namespace pipewright::nn
