#include "pipeline/step_loss.h"

#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "tensor/ops.h"

namespace pipewright::pipeline {

TupleLossFn as_tuple_loss(const LossFn& loss_fn) {
  if (!loss_fn) return nullptr;
  return [loss_fn](const nn::Tensors& outputs, const nn::Tensors& targets) {
    if (outputs.size() != 1) {
      throw std::invalid_argument(
          "train_step: the last stage must return one tensor for the loss, got " +
          std::to_string(outputs.size()) + " (use the nn::Tensors form of train_step)");
    }
    return loss_fn(outputs[0], targets.at(0));
  };
}

StepLoss::StepLoss(TupleLossFn loss_fn, std::vector<nn::Tensors> targets,
                   std::vector<int64_t> sizes, LossReduction reduction, bool keep_outputs,
                   double loss_scale, Tensor loss_scale_tensor)
    : loss_fn_(std::move(loss_fn)),
      targets_(std::move(targets)),
      sizes_(std::move(sizes)),
      batch_size_(std::accumulate(sizes_.begin(), sizes_.end(), int64_t{0})),
      loss_scale_(loss_scale),
      loss_scale_tensor_(std::move(loss_scale_tensor)),
      reduction_(reduction),
      keep_outputs_(keep_outputs),
      values_(sizes_.size()),
      grads_(sizes_.size()),
      sites_(sizes_.size()) {}

StageLoss StepLoss::stage_loss(int j, nn::Tensors& outputs) const {
  return {&loss_fn_, &targets_.at(static_cast<size_t>(j)), keep_outputs_ ? &outputs : nullptr};
}

void StepLoss::made(int j, const Tensor& loss, bool with_backward) {
  const auto i = static_cast<size_t>(j);
  values_.at(i) = loss.detach();  // read with the step's other values at its end
  if (with_backward) {
    Tensor grad =
        Tensor::full(loss.shape(), scale(j) * loss_scale_, {loss.dtype(), loss.device()});
    if (loss_scale_tensor_.defined()) {
      grad = ops::mul(grad, loss_scale_tensor_.to(loss.dtype()).reshape({}));
    }
    grads_.at(i) = std::move(grad);
  }
}

Tensor StepLoss::take_grad(int j) { return std::move(grads_.at(static_cast<size_t>(j))); }

double StepLoss::scale(int j) const {
  if (reduction_ == LossReduction::kSum) return 1.0;
  return static_cast<double>(sizes_.at(static_cast<size_t>(j))) /
         static_cast<double>(batch_size_);
}

}  // namespace pipewright::pipeline
