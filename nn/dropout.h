// Dropout: inverted dropout during training, identity in eval (torch.nn.Dropout).
#pragma once

#include <string>

#include "nn/module.h"

namespace pipewright::nn {

/// In training, elements are zeroed with probability p and the rest scaled by 1/(1-p)
/// (autograd::dropout with a (seed, offset) of the Philox stream). Under a RandomKeyGuard
/// the mask is keyed by (seed, step, layer, draw, sample) (Note [Keyed randomness],
/// nn/random_key.h: what a pipeline does, so any cut draws the same masks); otherwise each
/// forward reserves a fresh range of the calling thread's current_generator()
/// (tensor/generator.h), and installing the same Generator state again replays the mask.
/// In eval, or with p = 0, forward returns its input.
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
