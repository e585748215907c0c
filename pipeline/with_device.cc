// WithDevice: a transparent wrapper that carries a device for derive_placement.
#include "pipeline/with_device.h"

#include <stdexcept>

namespace pipewright::pipeline {

WithDevice::WithDevice(std::shared_ptr<nn::Module> module, Device device)
    : module_(std::move(module)), device_(device) {
  if (module_ == nullptr) {
    throw std::invalid_argument("WithDevice: the module to place on " + device_.str() + " is null");
  }
  register_module("_module", module_);
}

Tensor WithDevice::forward(const Tensor& input) { return module_->forward(input); }

nn::Tensors WithDevice::forward(const nn::Tensors& inputs) { return module_->forward(inputs); }

std::string WithDevice::str() const {
  return "WithDevice(" + module_->str() + ", device=" + device_.str() + ")";
}

}  // namespace pipewright::pipeline
