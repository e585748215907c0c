// GELU: the Gaussian Error Linear Unit (torch.nn.GELU).
#pragma once

#include <string>

#include "nn/module.h"

namespace pipewright::nn {

/// x · Φ(x) elementwise (approximate = "none", torch's default), or GPT-2's tanh form
/// (approximate = "tanh"); see ops::gelu for the formulas. Any shape, float32 / float64.
class GELU : public Module {
 public:
  /// Throws std::invalid_argument unless approximate is "none" or "tanh".
  explicit GELU(std::string approximate = "none");
  using Module::forward;
  Tensor forward(const Tensor& x) override;
  /// "GELU(approximate='none')".
  std::string str() const override;
  const std::string& approximate() const { return approximate_; }

 private:
  std::string approximate_;
};

}  // namespace pipewright::nn
