// Parameter-free layers: ReLU, Tanh, Sigmoid, Identity, Flatten (torch.nn's namesakes).
// Each forward is the autograd op of the same name, on any shape, float32/float64.
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"

namespace pipewright::nn {

/// max(x, 0) elementwise.
class ReLU : public Module {
 public:
  using Module::forward;
  Tensor forward(const Tensor& x) override;
  std::string str() const override { return "ReLU()"; }
};

/// tanh(x) elementwise.
class Tanh : public Module {
 public:
  using Module::forward;
  Tensor forward(const Tensor& x) override;
  std::string str() const override { return "Tanh()"; }
};

/// 1 / (1 + e^-x) elementwise.
class Sigmoid : public Module {
 public:
  using Module::forward;
  Tensor forward(const Tensor& x) override;
  std::string str() const override { return "Sigmoid()"; }
};

/// Returns its input (the same tensor handle).
class Identity : public Module {
 public:
  using Module::forward;
  Tensor forward(const Tensor& x) override { return x; }
  std::string str() const override { return "Identity()"; }
};

/// [N, d1, d2, ...] -> [N, d1·d2·...] from start_dim on (torch.nn.Flatten(start_dim));
/// a view when the input is contiguous. Throws std::out_of_range for a bad start_dim.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1) : start_dim_(start_dim) {}
  using Module::forward;
  Tensor forward(const Tensor& x) override;
  std::string str() const override;

 private:
  int64_t start_dim_;
};

}  // namespace pipewright::nn
