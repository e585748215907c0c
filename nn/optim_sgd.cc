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

void SGD::update(size_t i, const Tensor& grad) { update_many({i}, {grad}); }

// As Adam's (Note [One launch per bucket], nn/optim_adam.cc): a device's parameters that share
// dtype and whether their momentum buffer is made now go to one sgd_step_multi call.
void SGD::update_many(const std::vector<size_t>& indices, const std::vector<Tensor>& grads) {
  const SGDOptions& o = options_;
  // The buffers a first step makes (buffer = g) are kept here until their kernel is issued, so
  // a throw leaves no buffer that was never filled.
  std::vector<Tensor> made(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    const size_t i = indices[k];
    const Tensor& param = params()[i];
    Tensor& buffer = momentum_buffers_[i];
    if (o.momentum == 0) continue;
    if (buffer.defined()) {
      buffer = on_param_device(i, buffer);
    } else if (DeviceGraph::capturing_on(param.device()) != nullptr) {
      throw std::logic_error("SGD: parameter " + std::to_string(i) +
                             " takes its first step inside a graph capture; its momentum "
                             "buffer would be made again at every replay. Run one step eagerly "
                             "before capturing");
    } else {
      made[k] = Tensor::empty(param.shape(), {.dtype = param.dtype(), .device = param.device()});
    }
  }
  const auto same = [&](size_t a, size_t b) {
    const Tensor &pa = params()[indices[a]], &pb = params()[indices[b]];
    return pa.device() == pb.device() && pa.dtype() == pb.dtype() &&
           made[a].defined() == made[b].defined();
  };
  for (const std::vector<size_t>& bucket : buckets(indices.size(), same)) {
    std::vector<SgdTensors> tensors;
    for (size_t k : bucket) {
      const size_t i = indices[k];
      const Tensor& buffer = made[k].defined() ? made[k] : momentum_buffers_[i];
      tensors.push_back({params()[i], grads[k], buffer});
    }
    const Tensor& param = tensors.front().param;
    if (DeviceGraph* graph = DeviceGraph::capturing_on(param.device())) {
      // Note [Per-replay scalars] (tensor/graph.h): the learning rate a replay reads is the
      // one set now, at its fill; the first step (which makes the buffer) is never captured.
      void* lr = graph->scalar_slot(
          param.device(), sizeof(double),
          [this, dtype = param.dtype()](void* bytes) {
            store_scalar(bytes, 0, options_.lr, dtype);
          },
          nullptr);
      PW_KERNEL(param.device(), sgd_step_multi)(tensors, 0.0, o.momentum, o.dampening,
                                                o.weight_decay, o.nesterov, false, lr,
                                                graph->gate(param.device()));
      continue;
    }
    PW_KERNEL(param.device(), sgd_step_multi)(tensors, o.lr, o.momentum, o.dampening,
                                              o.weight_decay, o.nesterov,
                                              made[bucket.front()].defined(), nullptr, nullptr);
    for (size_t k : bucket) {
      if (made[k].defined()) momentum_buffers_[indices[k]] = made[k];
    }
  }
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
