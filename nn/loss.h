// Loss functions: nn::mse_loss, nn::cross_entropy (the autograd ops) and the MSELoss /
// CrossEntropyLoss modules (torch.nn's), which hold the reduction and label smoothing.
#pragma once

#include <string>

#include "autograd/loss.h"
#include "nn/module.h"

namespace pipewright::nn {

using autograd::Reduction;

// The functional losses, documented in autograd/loss.h:
//   Tensor mse_loss(input, target, Reduction = kMean);
//   Tensor cross_entropy(logits [N, C], int64 target [N], Reduction = kMean,
//                        double label_smoothing = 0.0);   // mean = Σ loss_i / N
// Each is a function object calling autograd's function, so that it can also be passed
// where a loss of (output, target) is expected, its defaults filled in, as torch's
// F.mse_loss is: pipe.train_step(x, y, nn::mse_loss).
struct MseLossFn {
  Tensor operator()(const Tensor& input, const Tensor& target,
                    Reduction reduction = Reduction::kMean) const {
    return autograd::mse_loss(input, target, reduction);
  }
};
struct CrossEntropyFn {
  Tensor operator()(const Tensor& logits, const Tensor& target,
                    Reduction reduction = Reduction::kMean, double label_smoothing = 0.0) const {
    return autograd::cross_entropy(logits, target, reduction, label_smoothing);
  }
};
inline constexpr MseLossFn mse_loss{};
inline constexpr CrossEntropyFn cross_entropy{};

/// A loss module: forward(input, target) -> loss. The list forward takes exactly
/// {input, target} (else std::invalid_argument naming the count) and returns {loss}.
class Loss : public Module {
 public:
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  Tensors forward(const Tensors& inputs) override;
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  using Module::operator();
};

/// torch.nn.MSELoss(reduction).
class MSELoss : public Loss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::kMean) : reduction_(reduction) {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  /// "MSELoss(reduction=mean)".
  std::string str() const override;

 private:
  Reduction reduction_;
};

/// torch.nn.CrossEntropyLoss(reduction, label_smoothing) on logits [N, C] and int64
/// targets [N]. Throws std::invalid_argument for label_smoothing outside [0, 1].
class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(Reduction reduction = Reduction::kMean, double label_smoothing = 0.0);
  using Loss::forward;
  Tensor forward(const Tensor& logits, const Tensor& target) override;
  /// "CrossEntropyLoss(reduction=mean, label_smoothing=0.1)".
  std::string str() const override;

 private:
  Reduction reduction_;
  double label_smoothing_;
};

}  // namespace pipewright::nn
