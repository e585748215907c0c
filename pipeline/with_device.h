// WithDevice: declares the device a child of a placement-built Pipe runs on
// (torch.distributed.pipeline.sync.WithDevice).
//
//   nn::Sequential model;
//   model.push_back(nn::Linear(784, 512));  // on cpu:0, where its parameters are
//   model.push_back(pipeline::WithDevice(nn::ReLU(), Device::cpu(1)));  // not cpu:0
//   model.push_back(pipeline::WithDevice(nn::Linear(512, 10), Device::cpu(1)));  // moved there
//   pipeline::Pipe pipe = pipeline::make_pipe(std::move(model));  // placement.h; balance {1, 2}
//
// derive_placement (placement.h) reads a child's device from its parameters and buffers; a
// child with none (ReLU, Flatten, ...) would run on the default CPU device, Device::cpu(0).
// WithDevice overrides that, and also places a child whose tensors live elsewhere: the Pipe
// moves the child to the declared device (Module::to), as torch's Pipe did.
//
// The wrapped module is registered as the child "_module" (torch's attribute name), so the
// wrapper's parameter and state_dict keys are "_module.<name>", and "3._module.weight" inside
// a Sequential, the same keys torch's model gives. Unlike torch's Pipe, the pipewright Pipe does
// not unwrap it: Pipe::module() keeps the wrapper, and with it the model's own keys (see
// docs/pipeline.md, "Building a Pipe by placement").
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "nn/module.h"
#include "tensor/device.h"

namespace pipewright::pipeline {

class WithDevice : public nn::Module {
 public:
  /// Wraps `module` (shared, not copied) and declares `device`. Nothing moves here; the Pipe
  /// moves the module. Throws std::invalid_argument for a null module.
  WithDevice(std::shared_ptr<nn::Module> module, Device device);
  /// Takes a module by value (moved into shared ownership).
  template <class M>
    requires(std::is_base_of_v<nn::Module, std::decay_t<M>>)
  WithDevice(M&& module, Device device)
      : WithDevice(std::make_shared<std::decay_t<M>>(std::forward<M>(module)), device) {}
  WithDevice(WithDevice&&) = default;
  WithDevice& operator=(WithDevice&&) = default;

  /// The wrapped module's forward, unchanged (any shapes it accepts; whatever it throws).
  Tensor forward(const Tensor& input) override;
  nn::Tensors forward(const nn::Tensors& inputs) override;
  /// "WithDevice(ReLU(), device=cpu:1)".
  std::string str() const override;

  /// The wrapped module and the declared device.
  nn::Module& module() const { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  Device device() const { return device_; }

 private:
  std::shared_ptr<nn::Module> module_;
  Device device_;
};

}  // namespace pipewright::pipeline
