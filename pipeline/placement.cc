// derive_placement and make_pipe: torch Pipe's _split_module over pipewright's devices.
#include "pipeline/placement.h"

#include <map>
#include <stdexcept>
#include <utility>

#include "pipeline/partition.h"
#include "pipeline/with_device.h"

namespace pipewright::pipeline {
namespace {

/// Device -> the dotted name of the first tensor (or nested WithDevice) found on it.
using DeviceNames = std::map<Device, std::string>;

bool is_own(const std::string& name) { return name.find('.') == std::string::npos; }

/// Adds the devices of `module`'s parameters and buffers, then its children's, depth first.
/// A WithDevice contributes its declared device instead of its contents.
void collect_devices(const nn::Module& module, const std::string& prefix, DeviceNames& found) {
  if (const auto* wrapper = dynamic_cast<const WithDevice*>(&module)) {
    const std::string name = prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1);
    found.emplace(wrapper->device(), name + " (WithDevice)");
    return;
  }
  for (const auto& [name, t] : module.named_parameters()) {
    if (is_own(name)) found.emplace(t.device(), prefix + name);
  }
  for (const auto& [name, t] : module.named_buffers()) {
    if (is_own(name)) found.emplace(t.device(), prefix + name);
  }
  for (const auto& [name, child] : module.children()) {
    collect_devices(*child, prefix + name + ".", found);
  }
}

std::string describe(const DeviceNames& found) {
  std::string s;
  for (const auto& [device, name] : found) {
    s += (s.empty() ? "" : ", ") + device.str() + " (first: " + name + ")";
  }
  return s;
}

/// placement_device, with `what` naming the module in the error ("child 2 of the Sequential").
Device device_of(const nn::Module& child, const std::string& what) {
  if (const auto* wrapper = dynamic_cast<const WithDevice*>(&child)) return wrapper->device();
  DeviceNames found;
  collect_devices(child, "", found);
  if (found.empty()) return Device::cpu(0);
  if (found.size() > 1) {
    throw std::invalid_argument(what + " has its parameters and buffers on more than one " +
                                "device: " + describe(found) +
                                "; move it to one device with Module::to or wrap it in "
                                "WithDevice: " +
                                child.str());
  }
  return found.begin()->first;
}

/// The index of partition k's first child.
int first_child(const Placement& placement, size_t k) {
  int first = 0;
  for (size_t i = 0; i < k; ++i) first += placement.balance[i];
  return first;
}

/// "child 3" or "children 0-1": the children of partition k.
std::string children_of(const Placement& placement, size_t k) {
  const int first = first_child(placement, k);
  const int last = first + placement.balance[k] - 1;
  return first == last ? "child " + std::to_string(first)
                       : "children " + std::to_string(first) + "-" + std::to_string(last);
}

/// Throws when a device holds two partitions with another between them (see
/// PlacementOptions::allow_revisit), naming the likely cause: a parameterless child of the
/// later partition, which runs on cpu:0 unless wrapped in WithDevice.
void check_no_revisit(const nn::Sequential& module, const Placement& placement) {
  for (size_t k = 1; k < placement.devices.size(); ++k) {
    for (size_t i = 0; i + 1 < k; ++i) {
      if (placement.devices[i] != placement.devices[k]) continue;
      const Device device = placement.devices[k];
      std::string message = "make_pipe: " + device.str() + " holds partitions " +
                            std::to_string(i) + " (" + children_of(placement, i) + ") and " +
                            std::to_string(k) + " (" + children_of(placement, k) + "), with " +
                            placement.devices[i + 1].str() + " between them; ";
      const int first = first_child(placement, k);
      for (int c = first; c < first + placement.balance[k]; ++c) {
        const nn::Module& child = module[static_cast<size_t>(c)];
        if (dynamic_cast<const WithDevice*>(&child) == nullptr && child.state_dict().empty()) {
          message += "child " + std::to_string(c) + " (" + child.str() +
                     ") has no parameters or buffers, so it runs on cpu:0 unless wrapped in "
                     "WithDevice; wrap it, or ";
          break;
        }
      }
      throw std::invalid_argument(message + "set PlacementOptions::allow_revisit to run " +
                                  std::to_string(placement.devices.size()) + " partitions, " +
                                  "each with its own worker");
    }
  }
}

}  // namespace

Device placement_device(const nn::Module& child) { return device_of(child, "the module"); }

Placement derive_placement(const nn::Sequential& module) {
  if (module.size() == 0) {
    throw std::invalid_argument(
        "cannot derive a placement from an empty Sequential (a Pipe needs at least one child)");
  }
  verify_module(module);
  Placement placement;
  for (size_t i = 0; i < module.size(); ++i) {
    const Device device = device_of(module[i], "child " + std::to_string(i) + " of the Sequential");
    placement.child_devices.push_back(device);
    if (i > 0 && device == placement.devices.back()) {
      ++placement.balance.back();
    } else {
      placement.balance.push_back(1);
      placement.devices.push_back(device);
    }
  }
  return placement;
}

PipeOptions placement_pipe_options(const nn::Sequential& module, const PlacementOptions& options) {
  Placement placement = derive_placement(module);
  if (!options.allow_revisit) check_no_revisit(module, placement);
  return {.balance = std::move(placement.balance),
          .devices = std::move(placement.devices),
          .chunks = options.chunks,
          .schedule = options.schedule,
          .deferred_batch_norm = options.deferred_batch_norm,
          .seed = options.seed,
          .threads_per_worker = options.threads_per_worker,
          .worker_cpus = options.worker_cpus};
}

Pipe make_pipe(nn::Sequential module, PlacementOptions options) {
  PipeOptions pipe_options = placement_pipe_options(module, options);
  return Pipe(std::move(module), std::move(pipe_options));
}

}  // namespace pipewright::pipeline
