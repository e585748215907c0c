#include "nn/optimizer.h"

#include <algorithm>
#include <iostream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace pipewright::nn {

namespace {

constexpr const char* kStatePrefix = "state.";
constexpr const char* kGroupsPrefix = "param_groups.";
constexpr const char* kGroupPrefix = "param_groups.0.";

// The key of hyperparameter `entry`: "lr" is group 0's ("param_groups.0.lr"), "1.weight_decay"
// names its group ("param_groups.1.weight_decay").
std::string group_key(const std::string& entry) {
  return (entry.find('.') == std::string::npos ? kGroupPrefix : kGroupsPrefix) + entry;
}

// The inverse of group_key: "param_groups.0.lr" -> "lr", "param_groups.1.x" -> "1.x".
std::string group_entry(const std::string& key) {
  const std::string rest = key.substr(std::string(kGroupsPrefix).size());
  return rest.compare(0, 2, "0.") == 0 ? rest.substr(2) : rest;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// "state.12.exp_avg" -> (12, "exp_avg"); false when malformed.
bool parse_state_key(const std::string& key, size_t& index, std::string& name) {
  const std::string rest = key.substr(std::string(kStatePrefix).size());
  const size_t dot = rest.find('.');
  if (dot == std::string::npos || dot == 0 || dot > 18 || dot + 1 == rest.size()) return false;
  const std::string digits = rest.substr(0, dot);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  if (digits.size() > 1 && digits[0] == '0') return false;  // one spelling per index
  index = std::stoull(digits);
  name = rest.substr(dot + 1);
  return true;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params,
                                            double weight_decay) {
  std::vector<ParamGroup> groups{{.params = {}, .weight_decay = weight_decay},
                                 {.params = {}, .weight_decay = 0.0}};
  for (const Tensor& p : params) groups[p.defined() && p.dim() >= 2 ? 0 : 1].params.push_back(p);
  return groups;
}

Optimizer::Optimizer(std::vector<Tensor> params)
    : params_(std::move(params)), steps_without_grad_(params_.size(), 0) {
  if (params_.empty()) throw std::invalid_argument("optimizer got an empty parameter list");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    std::ostringstream where;
    where << "optimizer parameter " << i;
    if (!p.defined()) throw std::invalid_argument(where.str() + " is an undefined tensor");
    if (!is_floating(p.dtype())) {
      throw std::invalid_argument(where.str() + " has dtype " + dtype_name(p.dtype()) +
                                  " (optimizers update float32 or float64 tensors)");
    }
    if (!p.is_contiguous()) {
      throw std::invalid_argument(where.str() + " of shape " + p.shape().str() +
                                  " is not contiguous (updated in place by a fused kernel)");
    }
    for (size_t j = 0; j < i; ++j) {
      if (params_[j].is_same(p)) {
        throw std::invalid_argument(where.str() + " is the same tensor as parameter " +
                                    std::to_string(j) + " (each parameter may appear once)");
      }
    }
  }
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

void Optimizer::step() {
  std::vector<size_t> all(params_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  step(all);
}

void Optimizer::step(const std::vector<size_t>& indices) {
  std::vector<Tensor> grads;
  grads.reserve(indices.size());
  std::vector<bool> seen(params_.size(), false);
  for (size_t i : indices) {
    if (i >= params_.size()) {
      throw std::out_of_range(std::string(name()) + ": step over parameter " + std::to_string(i) +
                              " of " + std::to_string(params_.size()));
    }
    if (seen[i]) {  // one list would update it twice at once (Note [Tensor lists])
      throw std::invalid_argument(std::string(name()) + ": parameter " + std::to_string(i) +
                                  " is listed twice in one step");
    }
    seen[i] = true;
    grads.push_back(checked_grad(i));  // all checked before any change
  }
  std::vector<size_t> stepped;
  std::vector<Tensor> stepped_grads;
  for (size_t k = 0; k < indices.size(); ++k) {
    if (grads[k].defined()) {
      stepped.push_back(indices[k]);
      stepped_grads.push_back(std::move(grads[k]));
    } else {
      count_step_without_grad(indices[k]);  // PyTorch skips parameters without a grad
    }
  }
  if (stepped.empty()) return;
  update_many(stepped, stepped_grads);
  for (size_t i : stepped) steps_without_grad_[i] = 0;
}

void Optimizer::update_many(const std::vector<size_t>& indices,
                            const std::vector<Tensor>& grads) {
  for (size_t k = 0; k < indices.size(); ++k) update(indices[k], grads[k]);
}

void Optimizer::count_step_without_grad(size_t i) {
  const Tensor& p = params_[i];
  if (!p.requires_grad()) {
    steps_without_grad_[i] = 0;  // frozen on purpose
    return;
  }
  if (++steps_without_grad_[i] != kStepsWithoutGradWarning) return;
  if (reported_without_grad_.exchange(true)) return;
  std::ostringstream msg;
  msg << "pipewright: warning: " << name() << ": parameter " << i << " (shape " << p.shape()
      << ", " << p.device() << ") requires grad but got no gradient in the last "
      << kStepsWithoutGradWarning
      << " steps, so it is not being trained. Either the model does not use it, or an operation "
         "between it and the loss recorded no history (Tensor's own methods such as reshape, to "
         "and detach record none; the functions of autograd/ do). To freeze it on purpose, "
         "set requires_grad(false). (Said once.)\n";
  std::cerr << msg.str() << std::flush;
}

std::vector<std::vector<size_t>> Optimizer::buckets(
    size_t count, const std::function<bool(size_t, size_t)>& same) {
  std::vector<std::vector<size_t>> out;
  for (size_t k = 0; k < count; ++k) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const std::vector<size_t>& b) { return same(b.front(), k); });
    if (it == out.end()) {
      out.push_back({k});
    } else {
      it->push_back(k);
    }
  }
  return out;
}

std::vector<Tensor> Optimizer::checked_grads() const {
  std::vector<Tensor> grads(params_.size());
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = checked_grad(i);
  return grads;
}

Tensor Optimizer::checked_grad(size_t i) const {
  const Tensor& p = params_[i];
  Tensor g = p.grad();
  if (!g.defined()) return g;
  if (g.shape() != p.shape() || g.dtype() != p.dtype() || g.device() != p.device()) {
    std::ostringstream msg;
    msg << name() << ": the grad of parameter " << i << " (shape " << g.shape() << ", "
        << g.dtype() << ", " << g.device() << ") does not match the parameter (shape "
        << p.shape() << ", " << p.dtype() << ", " << p.device() << ")";
    throw std::invalid_argument(msg.str());
  }
  return g.contiguous();
}

Tensor Optimizer::state_like_param(size_t i, const std::string& key, const Tensor& t) const {
  const Tensor& p = params_[i];
  if (!t.defined()) throw std::invalid_argument(std::string(name()) + ": '" + key + "' is undefined");
  if (t.shape() != p.shape() || t.dtype() != p.dtype()) {
    std::ostringstream msg;
    msg << name() << ": '" << key << "' has shape " << t.shape() << " and dtype " << t.dtype()
        << ", expected the parameter's shape " << p.shape() << " and dtype " << p.dtype();
    throw std::invalid_argument(msg.str());
  }
  // to() returns the tensor itself when it is already on the device: clone to own the memory.
  Tensor moved = t.to(p.device());
  return moved.is_same(t) ? t.clone() : moved.contiguous();
}

int64_t Optimizer::step_value(const std::string& key, const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::kInt64 || t.numel() != 1) {
    std::ostringstream msg;
    msg << "optimizer state '" << key << "' must be a one-element int64 tensor";
    if (t.defined()) msg << " (got shape " << t.shape() << ", " << t.dtype() << ")";
    throw std::invalid_argument(msg.str());
  }
  const int64_t step = t.to_vector<int64_t>()[0];
  if (step < 1) {
    throw std::invalid_argument("optimizer state '" + key + "' = " + std::to_string(step) +
                                " (a step count is >= 1)");
  }
  return step;
}

Tensor Optimizer::step_tensor(int64_t step) {
  return Tensor::from_vector(std::vector<int64_t>{step}, Shape{});
}

Tensor Optimizer::on_param_device(size_t i, const Tensor& t) const {
  return t.device() == params_[i].device() ? t : t.to(params_[i].device());
}

std::vector<const void*> Optimizer::state_addresses() const {
  std::vector<const void*> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (const auto& [entry, t] : param_state(i)) {
      if (t.defined() && !t.device().is_cpu()) out.push_back(t.raw_data());
    }
  }
  return out;
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (const auto& [entry, t] : param_state(i)) {
      out.emplace_back(kStatePrefix + std::to_string(i) + "." + entry, t.clone());
    }
  }
  for (const auto& [entry, value] : hyperparameters()) {
    out.emplace_back(group_key(entry), Tensor::scalar(value, {.dtype = DType::kFloat64}));
  }
  return out;
}

void Optimizer::load_state_dict(const NamedTensors& state) {
  const std::vector<std::string> names = state_names();
  std::set<std::string> hyper_names;
  for (const auto& [entry, value] : hyperparameters()) hyper_names.insert(entry);

  std::vector<std::map<std::string, Tensor>> per_param(params_.size());
  std::map<std::string, double> hyper;
  std::set<std::string> seen;
  for (const auto& [key, t] : state) {
    if (!seen.insert(key).second) {
      throw std::invalid_argument(std::string(name()) + ": duplicate key '" + key + "'");
    }
    if (starts_with(key, kGroupsPrefix)) {
      const std::string entry = group_entry(key);
      if (!hyper_names.count(entry)) {
        throw std::invalid_argument(std::string(name()) + ": unexpected key '" + key +
                                    "' (hyperparameters: " +
                                    join(std::vector<std::string>(hyper_names.begin(), hyper_names.end())) + ")");
      }
      if (!t.defined() || t.numel() != 1 || !is_floating(t.dtype())) {
        throw std::invalid_argument(std::string(name()) + ": '" + key +
                                    "' must be a one-element floating tensor");
      }
      hyper[entry] = t.item();
      continue;
    }
    size_t index = 0;
    std::string entry;
    if (!starts_with(key, kStatePrefix) || !parse_state_key(key, index, entry) ||
        std::find(names.begin(), names.end(), entry) == names.end()) {
      throw std::invalid_argument(std::string(name()) + ": unexpected key '" + key +
                                  "' (expected state.<index>.{" + join(names) +
                                  "} or param_groups.0.<hyperparameter>)");
    }
    if (index >= params_.size()) {
      throw std::invalid_argument(std::string(name()) + ": key '" + key + "' names parameter " +
                                  std::to_string(index) + " but the optimizer has " +
                                  std::to_string(params_.size()) + " parameters");
    }
    per_param[index][entry] = entry == "step" ? step_tensor(step_value(key, t))
                                              : state_like_param(index, key, t);
  }

  std::vector<std::string> missing;
  for (const auto& entry : hyper_names) {
    if (!hyper.count(entry)) missing.push_back(group_key(entry));
  }
  for (size_t i = 0; i < per_param.size(); ++i) {
    if (per_param[i].empty()) continue;  // never stepped: no state, like PyTorch
    for (const auto& entry : names) {
      if (!per_param[i].count(entry)) {
        missing.push_back(kStatePrefix + std::to_string(i) + "." + entry);
      }
    }
  }
  if (!missing.empty()) {
    throw std::invalid_argument(std::string(name()) + ": missing keys in the state dict: " +
                                join(missing));
  }
  validate_hyperparameters(hyper);
  commit_state(std::move(per_param), hyper);
}

}  // namespace pipewright::nn
