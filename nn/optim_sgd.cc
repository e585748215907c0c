#include "nn/optim_sgd.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "tensor/graph.h"
#include "tensor/kernels.h"

namespace pipewright::nn {

namespace {

void validate(const SGDOptions& o) {
  std::ostringstream msg;
  msg << "SGD: ";
  if (!(o.lr >= 0)) {
    msg << "invalid learning rate lr=" << o.lr << " (must be >= 0)";
  } else if (!(o.momentum >= 0) || !std::isfinite(o.momentum)) {
    msg << "invalid momentum=" << o.momentum << " (must be >= 0)";
  } else if (!std::isfinite(o.dampening)) {
    msg << "invalid dampening=" << o.dampening << " (must be finite)";
  } else if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay)) {
    msg << "invalid weight_decay=" << o.weight_decay << " (must be >= 0)";
  } else if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
    msg << "nesterov momentum requires momentum > 0 and dampening = 0 (got momentum="
        << o.momentum << ", dampening=" << o.dampening << ")";
  } else {
    return;
  }
  throw std::invalid_argument(msg.str());
}

SGDOptions from_values(const std::map<std::string, double>& v) {
  const double nesterov = v.at("nesterov");
  if (nesterov != 0 && nesterov != 1) {
    std::ostringstream msg;
    msg << "SGD: param_groups.0.nesterov=" << nesterov << " (a flag is 0 or 1)";
    throw std::invalid_argument(msg.str());
  }
  return {.lr = v.at("lr"),
          .momentum = v.at("momentum"),
          .dampening = v.at("dampening"),
          .weight_decay = v.at("weight_decay"),
          .nesterov = nesterov == 1};
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params)), options_(options) {
  validate(options_);
  momentum_buffers_.resize(this->params().size());
}

void SGD::set_lr(double lr) {
  SGDOptions changed = options_;
  changed.lr = lr;
  validate(changed);
  options_ = changed;
}

void SGD::update(size_t i, const Tensor& grad) {
  const SGDOptions& o = options_;
  Tensor param = params()[i];
  Tensor& buffer = momentum_buffers_[i];
  if (DeviceGraph* graph = DeviceGraph::capturing_on(param.device())) {
    // Note [Per-replay scalars] (tensor/graph.h): the learning rate a replay reads is the one
    // set now, at its fill; the first step (which makes the buffer) is never captured.
    if (o.momentum != 0 && !buffer.defined()) {
      throw std::logic_error("SGD: parameter " + std::to_string(i) +
                             " takes its first step inside a graph capture; its momentum "
                             "buffer would be made again at every replay. Run one step eagerly "
                             "before capturing");
    }
    void* lr = graph->scalar_slot(
        param.device(), sizeof(double),
        [this, dtype = param.dtype()](void* bytes) { store_scalar(bytes, 0, options_.lr, dtype); },
        nullptr);
    Tensor no_buffer;
    PW_KERNEL(param.device(), sgd_step_indirect)(param, grad, o.momentum != 0 ? buffer : no_buffer,
                                                 lr, graph->gate(param.device()), o.momentum,
                                                 o.dampening, o.weight_decay, o.nesterov);
    return;
  }
  bool first_step = false;
  if (o.momentum != 0) {
    if (!buffer.defined()) {
      // Filled by the kernel (buffer = g) on this first step.
      buffer = Tensor::empty(param.shape(), {.dtype = param.dtype(), .device = param.device()});
      first_step = true;
    } else {
      buffer = on_param_device(i, buffer);
    }
  }
  Tensor no_buffer;
  PW_KERNEL(param.device(), sgd_step)(param, grad, o.momentum != 0 ? buffer : no_buffer, o.lr,
                                      o.momentum, o.dampening, o.weight_decay, o.nesterov,
                                      first_step);
}

std::vector<std::string> SGD::state_names() const { return {"momentum_buffer"}; }

NamedTensors SGD::param_state(size_t i) const {
  if (!momentum_buffers_[i].defined()) return {};
  return {{"momentum_buffer", momentum_buffers_[i]}};
}

std::vector<std::pair<std::string, double>> SGD::hyperparameters() const {
  return {{"lr", options_.lr},
          {"momentum", options_.momentum},
          {"dampening", options_.dampening},
          {"weight_decay", options_.weight_decay},
          {"nesterov", options_.nesterov ? 1.0 : 0.0}};
}

void SGD::validate_hyperparameters(const std::map<std::string, double>& values) const {
  validate(from_values(values));
}

void SGD::commit_state(std::vector<std::map<std::string, Tensor>> per_param,
                       const std::map<std::string, double>& hyperparameters) {
  options_ = from_values(hyperparameters);
  for (size_t i = 0; i < per_param.size(); ++i) {
    auto it = per_param[i].find("momentum_buffer");
    momentum_buffers_[i] = it == per_param[i].end() ? Tensor() : it->second;
  }
}

}  // namespace pipewright::nn
