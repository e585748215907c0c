// LayerNorm and RMSNorm (see normalization.h).
#include "nn/normalization.h"

#include <limits>
#include <sstream>
#include <stdexcept>

#include "autograd/layer_norm.h"

namespace pipewright::nn {
namespace {

void check_sizes(const char* name, int64_t dim, double eps) {
  if (dim <= 0 || !(eps >= 0)) {
    std::ostringstream os;
    os << name << ": dim must be positive and eps >= 0, got dim " << dim << ", eps " << eps;
    throw std::invalid_argument(os.str());
  }
}

void check_input(const Module& m, const Tensor& x, int64_t dim) {
  if (!x.defined() || x.dim() < 1 || x.size(-1) != dim) {
    throw std::invalid_argument(m.str() + ": input has shape " +
                                (x.defined() ? x.shape().str() : std::string("(undefined)")) +
                                ", expected [*, " + std::to_string(dim) + "]");
  }
}

}  // namespace

LayerNorm::LayerNorm(int64_t dim, double eps, bool elementwise_affine, bool bias,
                     TensorOptions options)
    : dim_(dim), eps_(eps) {
  check_sizes("LayerNorm", dim, eps);
  if (elementwise_affine) {
    weight_ = register_parameter("weight", Tensor::ones(Shape{dim}, options));
    if (bias) bias_ = register_parameter("bias", Tensor::zeros(Shape{dim}, options));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  check_input(*this, x, dim_);
  return autograd::layer_norm(x, weight_, bias_, eps_);
}

std::string LayerNorm::str() const {
  std::ostringstream os;
  os << "LayerNorm(" << dim_ << ", eps=" << eps_
     << ", elementwise_affine=" << (weight_.defined() ? "true" : "false");
  if (weight_.defined() && !bias_.defined()) os << ", bias=false";
  os << ")";
  return os.str();
}

RMSNorm::RMSNorm(int64_t dim, std::optional<double> eps, bool elementwise_affine,
                 TensorOptions options)
    : dim_(dim), eps_(eps) {
  check_sizes("RMSNorm", dim, eps.value_or(0.0));
  if (elementwise_affine) weight_ = register_parameter("weight", Tensor::ones(Shape{dim}, options));
}

Tensor RMSNorm::forward(const Tensor& x) {
  check_input(*this, x, dim_);
  const double machine_eps = x.dtype() == DType::kFloat64
                                 ? std::numeric_limits<double>::epsilon()
                                 : std::numeric_limits<float>::epsilon();
  return autograd::rms_norm(x, weight_, eps_.value_or(machine_eps));
}

std::string RMSNorm::str() const {
  std::ostringstream os;
  os << "RMSNorm(" << dim_ << ", eps=";
  if (eps_) {
    os << *eps_;
  } else {
    os << "None";
  }
  os << ", elementwise_affine=" << (weight_.defined() ? "true" : "false") << ")";
  return os.str();
}

}  // namespace pipewright::nn
