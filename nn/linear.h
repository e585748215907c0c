// Linear: the fully connected layer (torch.nn.Linear).
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"

namespace pipewright::nn {

/// y = x·Wᵀ + b with weight [out_features, in_features] and bias [out_features].
/// Initialisation (PyTorch's reset_parameters): W and b ~ U(-1/√in, 1/√in), drawn from
/// pipewright::current_generator() (weight first, then bias), in options.dtype on
/// options.device. Parameters "weight", "bias" (absent when bias = false).
class Linear : public Module {
 public:
  /// Throws std::invalid_argument when in_features or out_features <= 0.
  Linear(int64_t in_features, int64_t out_features, bool bias = true, TensorOptions options = {});

  using Module::forward;
  /// x [*, in_features] -> [*, out_features] (autograd::linear: one node, B/W split).
  /// Throws std::invalid_argument "Linear(in_features=784): input has shape [32, 100],
  /// expected [*, 784]".
  Tensor forward(const Tensor& x) override;
  /// "Linear(in_features=784, out_features=1024, bias=true)".
  std::string str() const override;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  const Tensor& weight() const { return weight_; }
  /// Undefined when constructed with bias = false.
  const Tensor& bias() const { return bias_; }

 private:
  int64_t in_features_;
  int64_t out_features_;
  Tensor weight_;
  Tensor bias_;
};

}  // namespace pipewright::nn
