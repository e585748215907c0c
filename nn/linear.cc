// Linear (see linear.h).
#include "nn/linear.h"

#include <cmath>
#include <stdexcept>

#include "autograd/linear.h"
#include "tensor/check.h"
#include "tensor/generator.h"

namespace pipewright::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, TensorOptions options)
    : in_features_(in_features), out_features_(out_features) {
  if (in_features <= 0 || out_features <= 0) {
    throw std::invalid_argument("Linear: in_features and out_features must be positive, got " +
                                std::to_string(in_features) + " and " +
                                std::to_string(out_features));
  }
  // kaiming_uniform_(a=√5) on [out, in] has bound √(6 / ((1 + 5)·in)) = 1/√in; the bias uses
  // 1/√fan_in as well.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  Generator& generator = current_generator();
  weight_ = Tensor::empty(Shape{out_features, in_features}, options);
  generator.uniform_(weight_, -bound, bound);
  register_parameter("weight", weight_);
  if (bias) {
    bias_ = Tensor::empty(Shape{out_features}, options);
    generator.uniform_(bias_, -bound, bound);
    register_parameter("bias", bias_);
  }
}

Tensor Linear::forward(const Tensor& x) {
  check_not_moved_from();
  if (x.dim() < 1 || x.size(-1) != in_features_) {
    throw std::invalid_argument("Linear(in_features=" + std::to_string(in_features_) +
                                "): input has shape " + x.shape().str() + ", expected [*, " +
                                std::to_string(in_features_) + "]");
  }
  check_like(str(), "input", x, "weight", weight_);
  return autograd::linear(x, weight_, bias_);
}

std::string Linear::str() const {
  return "Linear(in_features=" + std::to_string(in_features_) +
         ", out_features=" + std::to_string(out_features_) +
         ", bias=" + (bias_.defined() ? "true" : "false") + ")";
}

}  // namespace pipewright::nn
