#include "nn/serialize.h"

#include <stdexcept>

namespace pipewright::nn {

namespace {

constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimizerPrefix = "optimizer.";

void add_prefixed(const std::string& prefix, const NamedTensors& from, NamedTensors& to) {
  for (const auto& [key, t] : from) to.emplace_back(prefix + key, t);
}

}  // namespace

void save_state_dict(const std::string& path, const Module& module,
                     const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, module.state_dict(), metadata);
}

std::map<std::string, std::string> load_state_dict(const std::string& path, Module& module) {
  SafetensorsFile file = load_safetensors(path);
  module.load_state_dict(file.tensors);
  return file.metadata;
}

void save_checkpoint(const std::string& path, const Module& module, const Optimizer& optimizer,
                     const std::map<std::string, std::string>& metadata) {
  NamedTensors all;
  add_prefixed(kModelPrefix, module.state_dict(), all);
  add_prefixed(kOptimizerPrefix, optimizer.state_dict(), all);
  save_safetensors(path, all, metadata);
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& module,
                                                   Optimizer& optimizer) {
  SafetensorsFile file = load_safetensors(path);
  if (!file.verified) {
    throw SafetensorsError(path, std::string("no checksum (metadata '") + kChecksumKey +
                                     "'): not a checkpoint written by save_checkpoint, or its "
                                     "header was altered");
  }
  NamedTensors model_state, optimizer_state;
  const std::string model_prefix = kModelPrefix, optimizer_prefix = kOptimizerPrefix;
  for (auto& [key, t] : file.tensors) {
    if (key.compare(0, model_prefix.size(), model_prefix) == 0) {
      model_state.emplace_back(key.substr(model_prefix.size()), t);
    } else if (key.compare(0, optimizer_prefix.size(), optimizer_prefix) == 0) {
      optimizer_state.emplace_back(key.substr(optimizer_prefix.size()), t);
    } else {
      throw std::invalid_argument(path + ": key '" + key +
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
    optimizer.load_state_dict(optimizer_state);
  } catch (...) {
    module.load_state_dict(previous);
    throw;
  }
  return file.metadata;
}

}  // namespace pipewright::nn
