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
  return {.balance = std::move(placement.balance),
          .devices = std::move(placement.devices),
          .chunks = options.chunks,
          .checkpoint = options.checkpoint,
          .deferred_batch_norm = options.deferred_batch_norm,
          .schedule = options.schedule,
          .seed = options.seed,
          .threads_per_worker = options.threads_per_worker,
          .pin_workers = options.pin_workers};
}

Pipe make_pipe(nn::Sequential module, PlacementOptions options) {
  PipeOptions pipe_options = placement_pipe_options(module, options);
  return Pipe(std::move(module), std::move(pipe_options));
}

}  // namespace pipewright::pipeline
