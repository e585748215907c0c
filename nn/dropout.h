// Dropout: inverted dropout during training, identity in eval (torch.nn.Dropout).
#pragma once

#include <string>

#include "nn/module.h"

namespace pipewright::nn {

/// In training, each forward reserves a fresh range of the calling thread's
/// current_generator() (tensor/generator.h) and applies autograd::dropout with that
/// (seed, offset): elements are zeroed with probability p and the rest scaled by 1/(1-p).
/// A pipeline that installs the same Generator state (GeneratorGuard) for a recompute gets
/// the same mask. In eval, or with p = 0, forward returns its input.
class Dropout : public Module {
 public:
  /// Throws std::invalid_argument unless 0 <= p < 1.
  explicit Dropout(double p = 0.5);
  using Module::forward;
  Tensor forward(const Tensor& x) override;
  /// "Dropout(p=0.5)".
  std::string str() const override;
  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace pipewright::nn
