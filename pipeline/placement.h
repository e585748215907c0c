// Building a Pipe by placement: the partitions and devices follow from where the user put
// each child of the Sequential (torch.distributed.pipeline.sync.Pipe, which takes no balance).
//
//   nn::Linear first(784, 512), last(512, 10);
//   first.to(Device::cpu(0));
//   last.to(Device::cpu(1));
//   nn::Sequential model{std::move(first),
//                        pipeline::WithDevice(nn::ReLU(), Device::cpu(1)),  // else on cpu:0
//                        std::move(last)};
//   pipeline::Pipe pipe = pipeline::make_pipe(std::move(model), {.chunks = 8});
//   // pipe.balance() == {1, 2}, pipe.stage_devices() == {cpu:0, cpu:1}
//
// The rule (torch's _split_module), child by child:
//   - a WithDevice child runs on its declared device (the Pipe moves it there);
//   - any other child runs on the one device that holds all its parameters and buffers
//     (nested modules included; a nested WithDevice counts as its declared device); more than
//     one device is an error;
//   - a child with no parameters or buffers runs on "the CPU": Device::cpu(0), the default
//     device of every tensor;
//   - consecutive children on the same device form one partition; a device that appears
//     again after another one starts a new partition, with its own worker on that device.
//     make_pipe refuses such a revisit unless PlacementOptions::allow_revisit is set: it is
//     most often a parameterless child left without WithDevice, so on cpu:0 (cpu:0 cpu:1
//     cpu:0 cpu:2 where cpu:0 cpu:1 cpu:2 was meant).
//
// Differences from torch, on purpose: torch made every CPU child a partition of its own,
// because its CPU was one device beside the GPUs; pipewright's CPU devices cpu:0, cpu:1, ...
// are the pipeline's virtual devices (tensor/device.h), so consecutive children on one CPU
// device share a partition like children on one GPU. Buffers count as well as parameters
// (torch looked at parameters only). Pipe::module() keeps WithDevice wrappers and nested
// Sequentials as given (torch unwrapped and flattened them into its partitions), so the
// state_dict keys are the model's own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/sequential.h"
#include "pipeline/schedule/checkpoint_mode.h"
#include "pipeline/pipe.h"
#include "tensor/device.h"

namespace pipewright::pipeline {

/// What derive_placement reads off a module.
struct Placement {
  /// Children per partition, in order (PipeOptions::balance); Σ balance = module.size().
  std::vector<int> balance;
  /// The device of each partition (PipeOptions::devices); same length as balance.
  std::vector<Device> devices;
  /// The device of each child; module.size() entries.
  std::vector<Device> child_devices;
};

/// The device `child` runs on, by the rule above: WithDevice's declared device; else the one
/// device of all its parameters and buffers (recursively; a nested WithDevice contributes its
/// declared device and its own tensors are not looked at); else Device::cpu(0). Throws
/// std::invalid_argument when more than one device is found, naming the module (str()) and
/// each device with the first tensor found on it.
Device placement_device(const nn::Module& child);

/// The partitions and devices of `module` by placement (see the file comment); reads the
/// module, moves nothing. Throws std::invalid_argument for an empty module ("cannot derive a
/// placement from an empty Sequential"), for the same module instance appearing as two
/// children (verify_module's message), and for a child whose tensors are on more than one
/// device ("child 2 of the Sequential has its parameters and buffers on more than one
/// device: cpu:0 (first: 0.weight), cpu:1 (first: 1.weight); move it to one device with
/// Module::to or wrap it in WithDevice: Sequential(...)").
Placement derive_placement(const nn::Sequential& module);

/// The PipeOptions fields that do not follow from placement, with torch Pipe's defaults
/// (chunks 1, checkpoint except_last). There is no virtual_stages: each partition has its own
/// worker (a device may hold several workers).
struct PlacementOptions {
  /// Micro-batches per mini-batch (PipeOptions::chunks).
  int chunks = 1;
  /// The schedule: name, virtual stages, recompute (PipeOptions::schedule). A placement
  /// from the devices' order holds one stage per worker: virtual_stages 1.
  ScheduleSpec schedule = {};
  /// torchgpipe's deferred_batch_norm (PipeOptions::deferred_batch_norm).
  bool deferred_batch_norm = false;
  /// Seeds the workers' generators (PipeOptions::seed).
  uint64_t seed = 0;
  /// Intra-op threads of each worker; 0 = max(1, hardware_threads() / workers).
  int threads_per_worker = 0;
  /// Which CPUs the workers may run on (PipeOptions::worker_cpus).
  WorkerCpus worker_cpus = WorkerCpus::kShared;
  /// Accept a device that holds two partitions with another device's between them (each
  /// partition then has its own worker, both on that device). False: refused, naming them.
  bool allow_revisit = false;
};

/// PipeOptions for `module`: balance and devices from derive_placement(module), the rest from
/// `options`. Throws what derive_placement throws, and std::invalid_argument when a device
/// holds two partitions with another between them and options.allow_revisit is false
/// ("make_pipe: cpu:0 holds partitions 0 (children 0-1) and 2 (child 3), with cpu:1
/// between them; child 3 (ReLU()) has no parameters or buffers, so it runs on cpu:0 unless
/// wrapped in WithDevice; wrap it, or set PlacementOptions::allow_revisit").
PipeOptions placement_pipe_options(const nn::Sequential& module,
                                   const PlacementOptions& options = {});

/// torch's Pipe(module, chunks, checkpoint, deferred_batch_norm): a Pipe whose partitions and
/// devices follow the placement of `module`'s children, each partition moved to its device
/// (which moves WithDevice children to their declared devices). Inputs, outputs and every
/// call afterwards are those of a Pipe built with the same balance and devices (pipe.h).
/// Throws what placement_pipe_options throws, and what the Pipe constructor throws (chunks <= 0
/// -> std::invalid_argument; a parameter shared by children on different workers ->
/// std::invalid_argument naming it).
Pipe make_pipe(nn::Sequential module, PlacementOptions options = {});

}  // namespace pipewright::pipeline
