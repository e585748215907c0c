// Saving and resuming training: a Module's state dict, optionally with an Optimizer's state,
// in one safetensors file (nn/safetensors.h).
//
//   nn::save_state_dict("model.safetensors", model);              // weights only
//   nn::load_state_dict("model.safetensors", model);
//
//   nn::save_checkpoint("ckpt.safetensors", model, opt, {{"epoch", "3"}});
//   auto metadata = nn::load_checkpoint("ckpt.safetensors", model, opt);   // resume exactly
//
// A checkpoint stores the model's keys under "model." and the optimizer's under "optimizer.",
// its per-parameter state by parameter name ("model.0.weight",
// "optimizer.state.0.weight.momentum_buffer", "optimizer.param_groups.0.lr"), so it loads
// into an optimizer that lists the parameters in another order (other parameter groups, a
// model cut otherwise) and its entries can be split by stage. Files that number the state by
// index ("optimizer.state.3.exp_avg") still load, into an optimizer in the saved order.
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

/// The optimizer's state_dict() with each "state.<i>.<entry>" renamed
/// "state.<name>.<entry>", name the module's name of parameter i (Module::named_parameters).
/// Throws std::invalid_argument naming the index of a parameter that is not the module's.
NamedTensors optimizer_state_by_name(const Module& module, const Optimizer& optimizer);

/// The inverse, what Optimizer::load_state_dict takes: "state.<name>.<entry>" becomes
/// "state.<i>.<entry>" with i the optimizer's index of that parameter; keys numbered by
/// index and every other key pass through unchanged. Throws std::invalid_argument naming
/// the key when <name> is no parameter of the module the optimizer updates.
NamedTensors optimizer_state_by_index(const Module& module, const Optimizer& optimizer,
                                      const NamedTensors& state);

/// Saves the module's and the optimizer's state in one file (keys prefixed "model." and
/// "optimizer.", the optimizer's state by parameter name), atomically. Throws like
/// save_safetensors and optimizer_state_by_name.
void save_checkpoint(const std::string& path, const Module& module, const Optimizer& optimizer,
                     const std::map<std::string, std::string>& metadata = {});

/// What save_checkpoint writes: "model.<key>" for every state-dict entry, then
/// "optimizer.<key>" for optimizer_state_by_name's. Throws as optimizer_state_by_name.
NamedTensors checkpoint_tensors(const Module& module, const Optimizer& optimizer);

/// Loads checkpoint_tensors() (from any source: one file, or the shards of several merged)
/// into `module` and `optimizer`, all or nothing; `where` names the source in errors. Throws
/// std::invalid_argument for a key outside "model." and "optimizer.", and whatever
/// Module::load_state_dict / Optimizer::load_state_dict / optimizer_state_by_index reject.
void load_checkpoint_tensors(const NamedTensors& tensors, Module& module, Optimizer& optimizer,
                             const std::string& where);

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
