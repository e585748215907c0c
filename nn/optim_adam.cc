#include "nn/optim_adam.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "tensor/kernels.h"

namespace pipewright::nn {

namespace {

void validate(const AdamOptions& o) {
  const auto [beta1, beta2] = o.betas;
  std::ostringstream msg;
  msg << (o.decoupled ? "AdamW" : "Adam") << ": ";
  if (!(o.lr >= 0)) {
    msg << "invalid learning rate lr=" << o.lr << " (must be >= 0)";
  } else if (!(beta1 >= 0 && beta1 < 1)) {
    msg << "invalid beta1=" << beta1 << " (must be in [0, 1))";
  } else if (!(beta2 >= 0 && beta2 < 1)) {
    msg << "invalid beta2=" << beta2 << " (must be in [0, 1))";
  } else if (!(o.eps >= 0) || !std::isfinite(o.eps)) {
    msg << "invalid eps=" << o.eps << " (must be >= 0)";
  } else if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay)) {
    msg << "invalid weight_decay=" << o.weight_decay << " (must be >= 0)";
  } else {
    return;
  }
  throw std::invalid_argument(msg.str());
}

AdamOptions from_values(const std::map<std::string, double>& v) {
  const double decoupled = v.at("decoupled");
  if (decoupled != 0 && decoupled != 1) {
    std::ostringstream msg;
    msg << "Adam: param_groups.0.decoupled=" << decoupled << " (a flag is 0 or 1)";
    throw std::invalid_argument(msg.str());
  }
  return {.lr = v.at("lr"),
          .betas = {v.at("beta1"), v.at("beta2")},
          .eps = v.at("eps"),
          .weight_decay = v.at("weight_decay"),
          .decoupled = decoupled == 1};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Optimizer(std::move(params)), options_(options) {
  validate(options_);
  state_.resize(this->params().size());
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(std::move(params), {.lr = options.lr,
                               .betas = options.betas,
                               .eps = options.eps,
                               .weight_decay = options.weight_decay,
                               .decoupled = true}) {}

void Adam::set_lr(double lr) {
  AdamOptions changed = options_;
  changed.lr = lr;
  validate(changed);
  options_ = changed;
}

void Adam::step() {
  const std::vector<Tensor> grads = checked_grads();  // all checked before any change

  const AdamOptions& o = options_;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;  // PyTorch skips parameters without a grad
    Tensor param = params()[i];
    State& s = state_[i];
    if (s.step == 0) {
      const TensorOptions like{.dtype = param.dtype(), .device = param.device()};
      s.exp_avg = Tensor::zeros(param.shape(), like);
      s.exp_avg_sq = Tensor::zeros(param.shape(), like);
    } else {
      s.exp_avg = on_param_device(i, s.exp_avg);
      s.exp_avg_sq = on_param_device(i, s.exp_avg_sq);
    }
    s.step += 1;
    PW_KERNEL(param.device(), adam_step)(param, grads[i], s.exp_avg, s.exp_avg_sq, o.lr,
                                         o.betas.first, o.betas.second, o.eps, o.weight_decay,
                                         o.decoupled, s.step);
  }
}

std::vector<std::string> Adam::state_names() const { return {"step", "exp_avg", "exp_avg_sq"}; }

NamedTensors Adam::param_state(size_t i) const {
  const State& s = state_[i];
  if (s.step == 0) return {};
  return {{"step", step_tensor(s.step)}, {"exp_avg", s.exp_avg}, {"exp_avg_sq", s.exp_avg_sq}};
}

std::vector<std::pair<std::string, double>> Adam::hyperparameters() const {
  return {{"lr", options_.lr},
          {"beta1", options_.betas.first},
          {"beta2", options_.betas.second},
          {"eps", options_.eps},
          {"weight_decay", options_.weight_decay},
          {"decoupled", options_.decoupled ? 1.0 : 0.0}};
}

void Adam::validate_hyperparameters(const std::map<std::string, double>& values) const {
  validate(from_values(values));
}

void Adam::commit_state(std::vector<std::map<std::string, Tensor>> per_param,
                        const std::map<std::string, double>& hyperparameters) {
  options_ = from_values(hyperparameters);
  for (size_t i = 0; i < per_param.size(); ++i) {
    auto& entries = per_param[i];
    if (entries.empty()) {
      state_[i] = State{};
      continue;
    }
    state_[i] = State{.step = entries.at("step").to_vector<int64_t>()[0],
                      .exp_avg = entries.at("exp_avg"),
                      .exp_avg_sq = entries.at("exp_avg_sq")};
  }
}

}  // namespace pipewright::nn
