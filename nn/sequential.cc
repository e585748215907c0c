// Sequential: children "0", "1", ..., list forward through each, PyTorch-style str().
#include "nn/sequential.h"

#include "autograd/precision.h"
#include "nn/random_key.h"

#include <sstream>
#include <stdexcept>

namespace pipewright::nn {

void Sequential::push_back_shared(std::shared_ptr<Module> module) {
  if (module == nullptr) {
    throw std::invalid_argument("Sequential::push_back_shared: null module at index " +
                                std::to_string(modules_.size()));
  }
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

Module& Sequential::operator[](size_t i) const { return *ptr(i); }

const std::shared_ptr<Module>& Sequential::ptr(size_t i) const {
  if (i >= modules_.size()) {
    throw std::out_of_range("Sequential: index " + std::to_string(i) +
                            " out of range for size " + std::to_string(modules_.size()));
  }
  return modules_[i];
}

Sequential Sequential::slice(size_t begin, size_t end) const {
  if (begin > end || end > modules_.size()) {
    throw std::out_of_range("Sequential::slice(" + std::to_string(begin) + ", " +
                            std::to_string(end) + "): need begin <= end <= size " +
                            std::to_string(modules_.size()));
  }
  Sequential part;
  for (size_t i = begin; i < end; ++i) part.push_back_shared(modules_[i]);
  part.set_training_flag(is_training());
  part.first_layer_ = first_layer_ + begin;
  return part;
}

Tensor Sequential::forward(const Tensor& input) {
  Tensors out = forward(Tensors{input});
  if (out.size() != 1) {
    throw std::invalid_argument("Sequential::forward(const Tensor&): the last module returned " +
                                std::to_string(out.size()) + " tensors; call forward(Tensors)");
  }
  return out[0];
}

Tensors Sequential::forward(const Tensors& inputs) {
  check_not_moved_from();
  Tensors x = inputs;
  for (size_t i = 0; i < modules_.size(); ++i) {
    LayerScope layer(static_cast<int64_t>(first_layer_ + i));
    x = modules_[i]->forward(x);
    // 16-bit values between layers under a precision policy (Note [The precision policy]).
    if (autograd::current_precision() != autograd::Precision::kFloat32) {
      for (Tensor& t : x) t = autograd::round_to_precision(t);
    }
  }
  return x;
}

std::string Sequential::str() const {
  std::ostringstream os;
  os << "Sequential(";
  for (size_t i = 0; i < modules_.size(); ++i) {
    // Indent nested modules' continuation lines, like PyTorch's repr.
    std::string child = modules_[i]->str();
    std::string indented;
    for (char c : child) {
      indented += c;
      if (c == '\n') indented += "  ";
    }
    os << "\n  (" << i << "): " << indented;
  }
  os << (modules_.empty() ? ")" : "\n)");
  return os.str();
}

}  // namespace pipewright::nn
