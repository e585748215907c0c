// LayerNorm and RMSNorm over the last dim (torch.nn.LayerNorm, torch.nn.RMSNorm).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nn/module.h"

namespace pipewright::nn {

/// y = (x - mean) / √(var + eps) · weight + bias over the last dim of x [*, dim] (biased
/// variance; autograd::layer_norm: one node, fused kernels, B/W split). With
/// elementwise_affine (default) the parameters "weight" (ones) and "bias" (zeros; absent when
/// bias = false, torch's bias flag) are learned; without it there are none. Only a single
/// normalised dim (torch's normalized_shape = (dim,)).
class LayerNorm : public Module {
 public:
  /// Throws std::invalid_argument for dim <= 0 or eps < 0.
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true, TensorOptions options = {});
  using Module::forward;
  /// Throws std::invalid_argument "LayerNorm(256, ...): input has shape [4, 100], expected
  /// [*, 256]".
  Tensor forward(const Tensor& x) override;
  /// "LayerNorm(256, eps=1e-05, elementwise_affine=true)".
  std::string str() const override;

  int64_t dim() const { return dim_; }
  double eps() const { return eps_; }
  /// Undefined without elementwise_affine (bias also without bias).
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  int64_t dim_;
  double eps_;
  Tensor weight_, bias_;
};

/// y = x / √(mean(x²) + eps) · weight over the last dim of x [*, dim] (Zhang & Sennrich,
/// "Root Mean Square Layer Normalization", 2019; autograd::rms_norm). eps = nullopt uses
/// the machine epsilon of x's dtype, as torch does. Parameter "weight" (ones) with
/// elementwise_affine.
class RMSNorm : public Module {
 public:
  /// Throws std::invalid_argument for dim <= 0 or eps < 0.
  explicit RMSNorm(int64_t dim, std::optional<double> eps = std::nullopt,
                   bool elementwise_affine = true, TensorOptions options = {});
  using Module::forward;
  /// Throws std::invalid_argument naming the shapes, as LayerNorm.
  Tensor forward(const Tensor& x) override;
  /// "RMSNorm(256, eps=None, elementwise_affine=true)".
  std::string str() const override;

  const Tensor& weight() const { return weight_; }

 private:
  int64_t dim_;
  std::optional<double> eps_;
  Tensor weight_;
};

}  // namespace pipewright::nn
