// GELU (see gelu.h).
#include "nn/gelu.h"

#include <stdexcept>

#include "autograd/activation_ops.h"

namespace pipewright::nn {

GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  if (approximate_ != "none" && approximate_ != "tanh") {
    throw std::invalid_argument("GELU: approximate must be 'none' or 'tanh', got '" +
                                approximate_ + "'");
  }
}

Tensor GELU::forward(const Tensor& x) { return autograd::gelu(x, approximate_ == "tanh"); }

std::string GELU::str() const { return "GELU(approximate='" + approximate_ + "')"; }

}  // namespace pipewright::nn
