#include "nn/serialize.h"

#include <cctype>
#include <map>
#include <stdexcept>
#include <unordered_map>

namespace pipewright::nn {

namespace {

constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimizerPrefix = "optimizer.";

void add_prefixed(const std::string& prefix, const NamedTensors& from, NamedTensors& to) {
  for (const auto& [key, t] : from) to.emplace_back(prefix + key, t);
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

NamedTensors optimizer_state_by_name(const Module& module, const Optimizer& optimizer) {
  std::unordered_map<const TensorImpl*, std::string> names;
  for (const auto& [name, p] : module.named_parameters()) names.emplace(p.impl(), name);
  std::vector<std::string> name_of;
  for (size_t i = 0; i < optimizer.params().size(); ++i) {
    auto it = names.find(optimizer.params()[i].impl());
    if (it == names.end()) {
      throw std::invalid_argument("optimizer_state_by_name: the optimizer's parameter " +
                                  std::to_string(i) + " is not a parameter of the module");
    }
    name_of.push_back(it->second);
  }
  NamedTensors out;
  for (auto& [key, t] : optimizer.state_dict()) {
    const size_t first = key.find('.'), last = key.rfind('.');
    if (key.compare(0, 6, "state.") != 0 || first == last) {
      out.emplace_back(key, t);
      continue;
    }
    const size_t i = std::stoul(key.substr(first + 1, last - first - 1));
    out.emplace_back("state." + name_of.at(i) + key.substr(last), t);
  }
  return out;
}

NamedTensors optimizer_state_by_index(const Module& module, const Optimizer& optimizer,
                                      const NamedTensors& state) {
  std::unordered_map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < optimizer.params().size(); ++i) {
    index.emplace(optimizer.params()[i].impl(), i);
  }
  std::map<std::string, size_t> index_of;  // parameter name -> optimizer index
  for (const auto& [name, p] : module.named_parameters()) {
    if (auto it = index.find(p.impl()); it != index.end()) index_of.emplace(name, it->second);
  }
  NamedTensors out;
  for (const auto& [key, t] : state) {
    const size_t first = key.find('.'), last = key.rfind('.');
    const std::string middle =
        first == std::string::npos || first == last ? "" : key.substr(first + 1, last - first - 1);
    if (key.compare(0, 6, "state.") != 0 || middle.empty() || all_digits(middle)) {
      out.emplace_back(key, t);
      continue;
    }
    auto it = index_of.find(middle);
    if (it == index_of.end()) {
      throw std::invalid_argument("optimizer state '" + key + "': '" + middle +
                                  "' is not a parameter the optimizer updates");
    }
    out.emplace_back("state." + std::to_string(it->second) + key.substr(last), t);
  }
  return out;
}

void save_state_dict(const std::string& path, const Module& module,
                     const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, module.state_dict(), metadata);
}

std::map<std::string, std::string> load_state_dict(const std::string& path, Module& module) {
  SafetensorsFile file = load_safetensors(path);
  module.load_state_dict(file.tensors);
  return file.metadata;
}

NamedTensors checkpoint_tensors(const Module& module, const Optimizer& optimizer) {
  NamedTensors all;
  add_prefixed(kModelPrefix, module.state_dict(), all);
  add_prefixed(kOptimizerPrefix, optimizer_state_by_name(module, optimizer), all);
  return all;
}

void save_checkpoint(const std::string& path, const Module& module, const Optimizer& optimizer,
                     const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, checkpoint_tensors(module, optimizer), metadata);
}

void load_checkpoint_tensors(const NamedTensors& tensors, Module& module, Optimizer& optimizer,
                             const std::string& where) {
  NamedTensors model_state, optimizer_state;
  const std::string model_prefix = kModelPrefix, optimizer_prefix = kOptimizerPrefix;
  for (const auto& [key, t] : tensors) {
    if (key.compare(0, model_prefix.size(), model_prefix) == 0) {
      model_state.emplace_back(key.substr(model_prefix.size()), t);
    } else if (key.compare(0, optimizer_prefix.size(), optimizer_prefix) == 0) {
      optimizer_state.emplace_back(key.substr(optimizer_prefix.size()), t);
    } else {
      throw std::invalid_argument(where + ": key '" + key +
                                  "' is neither under 'model.' nor under 'optimizer.' (not a "
                                  "checkpoint written by save_checkpoint?)");
    }
  }
  // All or nothing: when the optimizer rejects its part, the module gets its old state back
  // (a copy taken here; Module::load_state_dict itself changes nothing when it throws).
  NamedTensors previous;
  for (const auto& [key, t] : module.state_dict()) previous.emplace_back(key, t.clone());
  module.load_state_dict(model_state);
  try {
    optimizer.load_state_dict(optimizer_state_by_index(module, optimizer, optimizer_state));
  } catch (...) {
    module.load_state_dict(previous);
    throw;
  }
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& module,
                                                   Optimizer& optimizer) {
  SafetensorsFile file = load_safetensors(path);
  if (!file.verified) {
    throw SafetensorsError(path, std::string("no checksum (metadata '") + kChecksumKey +
                                     "'): not a checkpoint written by save_checkpoint, or its "
                                     "header was altered");
  }
  load_checkpoint_tensors(file.tensors, module, optimizer, path);
  return file.metadata;
}

}  // namespace pipewright::nn
