// Loss modules (see loss.h).
#include "nn/loss.h"

#include <sstream>
#include <stdexcept>

namespace pipewright::nn {

Tensors Loss::forward(const Tensors& inputs) {
  if (inputs.size() != 2) {
    throw std::invalid_argument(str() + ": expected 2 input tensors {input, target}, got " +
                                std::to_string(inputs.size()));
  }
  return {forward(inputs[0], inputs[1])};
}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  return mse_loss(input, target, reduction_);
}

std::string MSELoss::str() const {
  return std::string("MSELoss(reduction=") + autograd::reduction_name(reduction_) + ")";
}

CrossEntropyLoss::CrossEntropyLoss(Reduction reduction, double label_smoothing)
    : reduction_(reduction), label_smoothing_(label_smoothing) {
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0)) {
    throw std::invalid_argument("CrossEntropyLoss: label_smoothing must be in [0, 1], got " +
                                std::to_string(label_smoothing));
  }
}

Tensor CrossEntropyLoss::forward(const Tensor& logits, const Tensor& target) {
  return cross_entropy(logits, target, reduction_, label_smoothing_);
}

std::string CrossEntropyLoss::str() const {
  std::ostringstream os;
  os << "CrossEntropyLoss(reduction=" << autograd::reduction_name(reduction_)
     << ", label_smoothing=" << label_smoothing_ << ")";
  return os.str();
}

}  // namespace pipewright::nn
