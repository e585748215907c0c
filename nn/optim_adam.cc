#include "nn/optim_adam.h"

#include <cmath>
#include <string>
#include <sstream>
#include <stdexcept>

#include "tensor/graph.h"
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

std::vector<Tensor> all_params(const std::vector<ParamGroup>& groups) {
  std::vector<Tensor> params;
  for (const ParamGroup& g : groups) params.insert(params.end(), g.params.begin(), g.params.end());
  return params;
}

AdamOptions adam_options(const AdamWOptions& o) {
  return {.lr = o.lr, .betas = o.betas, .eps = o.eps, .weight_decay = o.weight_decay,
          .decoupled = true};
}

// The group hyperparameter names: "1.weight_decay" and "<g>.num_params" (group 0's without
// the "0.", the base's convention).
std::string group_name(size_t g, const char* entry) {
  return g == 0 ? std::string(entry) : std::to_string(g) + "." + entry;
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<ParamGroup>{{.params = std::move(params)}}, options) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Optimizer(all_params(groups)), options_(options) {
  for (const ParamGroup& g : groups) {
    group_sizes_.push_back(static_cast<int64_t>(g.params.size()));
    group_decay_.push_back(g.weight_decay.value_or(options.weight_decay));
    AdamOptions group = options_;
    group.weight_decay = group_decay_.back();
    validate(group);
  }
  options_.weight_decay = group_decay_.at(0);
  validate(options_);
  state_.resize(this->params().size());
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(std::move(params), adam_options(options)) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : Adam(std::move(groups), adam_options(options)) {}

void Adam::set_lr(double lr) {
  AdamOptions changed = options_;
  changed.lr = lr;
  validate(changed);
  options_ = changed;
}

void Adam::update(size_t i, const Tensor& grad) { update_many({i}, {grad}); }

// Note [One launch per bucket]
// The parameters of one call are updated in buckets that share what a multi-tensor kernel
// takes once (Kernels::adam_step_multi): device, dtype, weight decay and step count, in
// first-appearance order. The main job's step is then one bucket (one launch for 10
// parameters), a GPT's with decay groups two; a parameter that skipped steps (no grad) steps
// in a bucket of its own. Each element's arithmetic does not depend on its bucket.
void Adam::update_many(const std::vector<size_t>& indices, const std::vector<Tensor>& grads) {
  std::vector<double> decay(indices.size());
  std::vector<int64_t> steps(indices.size());  // before this update
  for (size_t k = 0; k < indices.size(); ++k) {
    const size_t i = indices[k];
    size_t group = 0;
    for (int64_t end = group_sizes_[0]; static_cast<int64_t>(i) >= end;) {
      end += group_sizes_[++group];
    }
    decay[k] = group_decay_[group];
    const Tensor& param = params()[i];
    State& s = state_[i];
    steps[k] = s.step;
    if (s.step == 0) {
      const TensorOptions like{.dtype = param.dtype(), .device = param.device()};
      s.exp_avg = Tensor::zeros(param.shape(), like);
      s.exp_avg_sq = Tensor::zeros(param.shape(), like);
    } else {
      s.exp_avg = on_param_device(i, s.exp_avg);
      s.exp_avg_sq = on_param_device(i, s.exp_avg_sq);
    }
  }
  const auto same = [&](size_t a, size_t b) {
    const Tensor &pa = params()[indices[a]], &pb = params()[indices[b]];
    return pa.device() == pb.device() && pa.dtype() == pb.dtype() && decay[a] == decay[b] &&
           steps[a] == steps[b];
  };
  const AdamOptions& o = options_;
  for (const std::vector<size_t>& bucket : buckets(indices.size(), same)) {
    std::vector<size_t> members;
    std::vector<AdamTensors> tensors;
    for (size_t k : bucket) {
      const State& s = state_[indices[k]];
      members.push_back(indices[k]);
      tensors.push_back({params()[indices[k]], grads[k], s.exp_avg, s.exp_avg_sq});
    }
    const Device device = tensors.front().param.device();
    const double bucket_decay = decay[bucket.front()];
    if (DeviceGraph* graph = DeviceGraph::capturing_on(device)) {
      update_replayed(*graph, members, tensors, bucket_decay);
      continue;
    }
    PW_KERNEL(device, adam_step_multi)(tensors, o.lr, o.betas.first, o.betas.second, o.eps,
                                       bucket_decay, o.decoupled, steps[bucket.front()] + 1,
                                       nullptr, nullptr);
    for (size_t i : members) state_[i].step += 1;  // once issued: a throw leaves the count
  }
}

// Note [Per-replay scalars] (tensor/graph.h): the kernels read each parameter's lr and bias
// corrections of its step t from a slot that each replay fills for t = step + 1 (4 values per
// member, in the bucket's order) and commits by advancing the members' `step`, exactly as
// eager updates would have; the capture itself changes no state. The members share their step
// count now (Note [One launch per bucket]); each reads its own, should they part later.
void Adam::update_replayed(DeviceGraph& graph, const std::vector<size_t>& members,
                           const std::vector<AdamTensors>& tensors, double decay) {
  for (size_t i : members) {
    if (state_[i].step != 0) continue;
    throw std::logic_error(std::string(name()) + ": parameter " + std::to_string(i) +
                           " takes its first step inside a graph capture; its state would be "
                           "zeroed at every replay. Run one step eagerly before capturing");
  }
  const Tensor& first = tensors.front().param;
  void* slot = graph.scalar_slot(
      first.device(), 4 * members.size() * sizeof(double),
      [this, members, decay, dtype = first.dtype()](void* bytes) {
        const AdamOptions& o = options_;
        for (size_t k = 0; k < members.size(); ++k) {
          const double t = static_cast<double>(state_[members[k]].step + 1);
          const double values[4] = {o.lr, 1.0 - std::pow(o.betas.first, t),
                                    1.0 - std::pow(o.betas.second, t), 1.0 - o.lr * decay};
          for (size_t v = 0; v < 4; ++v) store_scalar(bytes, 4 * k + v, values[v], dtype);
        }
      },
      [this, members] {
        for (size_t i : members) state_[i].step += 1;
      },
      /*gated=*/true);  // a skipped step keeps `step`
  PW_KERNEL(first.device(), adam_step_multi)(tensors, 0.0, options_.betas.first,
                                             options_.betas.second, options_.eps, decay,
                                             options_.decoupled, 1, slot,
                                             graph.gate(first.device()));
}

std::vector<const void*> Adam::state_addresses() const {
  std::vector<const void*> out;
  for (const State& s : state_) {
    for (const Tensor* t : {&s.exp_avg, &s.exp_avg_sq}) {
      if (t->defined() && !t->device().is_cpu()) out.push_back(t->raw_data());
    }
  }
  return out;
}

std::vector<std::string> Adam::state_names() const { return {"step", "exp_avg", "exp_avg_sq"}; }

NamedTensors Adam::param_state(size_t i) const {
  const State& s = state_[i];
  if (s.step == 0) return {};
  return {{"step", step_tensor(s.step)}, {"exp_avg", s.exp_avg}, {"exp_avg_sq", s.exp_avg_sq}};
}

std::vector<std::pair<std::string, double>> Adam::hyperparameters() const {
  std::vector<std::pair<std::string, double>> values{{"lr", options_.lr},
                                                     {"beta1", options_.betas.first},
                                                     {"beta2", options_.betas.second},
                                                     {"eps", options_.eps},
                                                     {"weight_decay", options_.weight_decay},
                                                     {"decoupled", options_.decoupled ? 1.0 : 0.0}};
  if (group_sizes_.size() == 1) return values;  // one group: no group entries (older files)
  for (size_t g = 0; g < group_sizes_.size(); ++g) {
    values.emplace_back(group_name(g, "num_params"), static_cast<double>(group_sizes_[g]));
    if (g > 0) values.emplace_back(group_name(g, "weight_decay"), group_decay_[g]);
  }
  return values;
}

void Adam::validate_hyperparameters(const std::map<std::string, double>& values) const {
  validate(from_values(values));
  for (size_t g = 0; g < group_sizes_.size() && group_sizes_.size() > 1; ++g) {
    const double size = values.at(group_name(g, "num_params"));
    if (size != static_cast<double>(group_sizes_[g])) {
      std::ostringstream msg;
      msg << name() << ": parameter group " << g << " has " << group_sizes_[g]
          << " parameters but the state dict's has " << size;
      throw std::invalid_argument(msg.str());
    }
    if (g == 0) continue;
    AdamOptions group = from_values(values);
    group.weight_decay = values.at(group_name(g, "weight_decay"));
    validate(group);
  }
}

void Adam::commit_state(std::vector<std::map<std::string, Tensor>> per_param,
                        const std::map<std::string, double>& hyperparameters) {
  options_ = from_values(hyperparameters);
  group_decay_[0] = options_.weight_decay;
  for (size_t g = 1; g < group_sizes_.size(); ++g) {
    group_decay_[g] = hyperparameters.at(group_name(g, "weight_decay"));
  }
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
