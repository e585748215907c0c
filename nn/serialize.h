// Saving and resuming training: a Module's state dict, optionally with an Optimizer's state,
// in one safetensors file (nn/safetensors.h).
//
//   nn::save_state_dict("model.safetensors", model);              // weights only
//   nn::load_state_dict("model.safetensors", model);
//
//   nn::save_checkpoint("ckpt.safetensors", model, opt, {{"epoch", "3"}});
//   auto metadata = nn::load_checkpoint("ckpt.safetensors", model, opt);   // resume exactly
//
// A checkpoint stores the model's keys under "model." and the optimizer's under "optimizer."
// ("model.0.weight", "optimizer.state.0.momentum_buffer", "optimizer.param_groups.0.lr").
// The optimizer must be built over model.parameters() in the same order as when saved.
#pragma once

#include <map>
#include <string>

#include "nn/module.h"
#include "nn/optimizer.h"
#include "nn/safetensors.h"

namespace pipewright::nn {

/// Saves module.state_dict() (parameters then buffers, dotted keys) to `path` atomically.
/// Throws like save_safetensors.
void save_state_dict(const std::string& path, const Module& module,
                     const std::map<std::string, std::string>& metadata = {});

/// Loads `path` into `module` in place (Module::load_state_dict: tensors are copied to each
/// parameter's device). A file with a checksum must match it; one without (from another tool)
/// loads unverified. Throws SafetensorsError for a bad file, std::invalid_argument (from
/// Module::load_state_dict) listing missing/unexpected keys or naming a shape/dtype mismatch.
/// Returns the file's metadata.
std::map<std::string, std::string> load_state_dict(const std::string& path, Module& module);

/// Saves the module's and the optimizer's state in one file (keys prefixed "model." and
/// "optimizer."), atomically. Throws like save_safetensors.
void save_checkpoint(const std::string& path, const Module& module, const Optimizer& optimizer,
                     const std::map<std::string, std::string>& metadata = {});

/// Restores a save_checkpoint() file into `module` and `optimizer` and returns its metadata.
/// Nothing is changed unless the whole file is intact: it must carry a matching checksum
/// (Note [Checksum] in nn/safetensors.h), so a truncated or bit-flipped file is refused before
/// any tensor is copied. Throws SafetensorsError for a bad file or one without a checksum,
/// std::invalid_argument for a key outside "model." and "optimizer." or whatever
/// Module::load_state_dict / Optimizer::load_state_dict reject. All or nothing: when the
/// optimizer rejects its part, the module's previous state is restored (a copy of it is held
/// during the load).
std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& module,
                                                   Optimizer& optimizer);

}  // namespace pipewright::nn
