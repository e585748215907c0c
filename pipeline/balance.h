// Automatic balance: choose PipeOptions::balance from measured per-layer costs
// (torchgpipe.balance: balance_by_time, balance_by_size and their block partition).
//
//   nn::Sequential model = ...;                      // on cpu:0, like the sample
//   Tensor sample = x.chunk(chunks)[0];              // one micro-batch
//   std::vector<int> balance = pipeline::balance_by_time(2, model, sample);
//   pipeline::Pipe pipe(std::move(model), {.balance = balance, .devices = ..., .chunks = chunks});
//
// Both balancers measure one cost per child of the Sequential (a "layer"), then cut the
// costs into `partitions` contiguous blocks whose largest sum is as small as possible
// (block_partition). The slowest (or fullest) stage bounds a pipeline's step, so that is the
// quantity to minimise.
//
// Note [Profiling leaves the module as it was]
// Profiling runs the real module, in training mode, with gradient recording on. Afterwards
// every observable piece of state is what it was before, also when a layer throws:
//   - parameters: never written (forward and backward only read them);
//   - .grad: the backward returns parameter gradients instead of accumulating them
//     (autograd::backward with the parameters as `inputs`), so no .grad is created or changed;
//   - buffers (BatchNorm running_mean / running_var / num_batches_tracked): copied before and
//     copied back in place (the same TensorImpl, the same storage);
//   - training flags: recorded per module and put back (a model with some children in eval
//     mode gets exactly those children back in eval mode);
//   - randomness: Dropout draws from a private Generator installed for the profile
//     (GeneratorGuard), so the caller's current_generator() does not advance;
//   - the calling thread's grad mode and checkpoint flags are restored; a BatchNorm1d in
//     deferred mode is profiled as a plain one and keeps its accumulated sums untouched.
// Profiling is single-threaded from the caller's view: do not use the module from another
// thread meanwhile.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/sequential.h"
#include "tensor/device.h"
#include "tensor/tensor.h"

namespace pipewright::pipeline {

/// Splits `costs` (one per layer, in order) into `partitions` non-empty contiguous blocks
/// minimising the largest block sum, and returns the block sizes (layers per block, Σ =
/// costs.size()), usable as PipeOptions::balance.
///
/// Exact for any integer costs, zero and negative included (Note [Block partition] in
/// balance.cc): a dynamic programme over suffixes, O(partitions · n²) time and
/// O(partitions · n) memory for n layers (n = 1000, 8 partitions: 8·10⁶ steps, milliseconds).
/// Among several optimal splits it returns the lexicographically smallest balance (earlier
/// stages take as few layers as the optimum allows), so the result is deterministic.
///
/// Throws std::invalid_argument when partitions <= 0 ("number of partitions must be
/// positive (partitions: 0)"), or when partitions > costs.size() ("more partitions than
/// layers (partitions: 5, layers: 3)").
std::vector<int> block_partition(const std::vector<int64_t>& costs, int partitions);

/// The largest block sum of `costs` cut by `balance` (what block_partition minimises).
/// Throws std::invalid_argument when balance is empty, has an entry <= 0 or does not sum to
/// costs.size() (naming both): partition.h's verify_balance_sum.
int64_t max_block_cost(const std::vector<int64_t>& costs, const std::vector<int>& balance);

// ---- by parameters (no profile) ----

/// A deterministic cut that needs no profile: the layers are grouped into blocks, each
/// starting at a layer that holds a weight matrix (a parameter of rank >= 2: Linear, a
/// convolution) and taking the layers after it that hold none (normalisations, whose
/// parameters are vectors; activations, Dropout, a skip's pop), so a layer that
/// post-processes a weight layer's output is never cut away from it; leading layers without a
/// matrix join the first block. A layer that stashes a skip and pops none (nn::Skippable)
/// opens a block too, with the weight layer after it: it begins what the skip goes around,
/// so a cut between residual blocks keeps their skips on one stage. The blocks are cut by
/// block_partition of their cost, parameter count + layer count, and the balance is returned
/// in layers (Σ = module.size()). When there are fewer blocks than `partitions`, the layers
/// themselves are cut, each costing its parameter count + 1.
///
/// Why blocks: a layer's parameter count is a proxy for its time only for weight layers (a
/// Linear's forward and backward are ~6 · rows · parameters FLOPs); the layers without a
/// matrix cost time per activation element, not per parameter, so a layer-level min-max cut
/// of parameter counts is free to heap them all onto one stage. On the main job's MLP
/// (Linear, BatchNorm1d, ReLU, Dropout per hidden layer) it cut 1 | 8, the first Linear alone,
/// and left the stages' busy times far apart; the block cut 4 | 5 evens them, brings the
/// measured bubble close to its replay and trains faster (the numbers: docs/BENCHMARKS.md,
/// "Balance: the block cut"); it is the cut balance_by_time chose on every quiet run.
/// DeepSpeed's PipelineModule partition_method "type:Linear" cuts at the same places.
///
/// Throws std::invalid_argument when partitions <= 0 or partitions > module.size() (the
/// block_partition messages).
std::vector<int> balance_by_parameters(int partitions, const nn::Sequential& module);

// ---- by time ----

struct BalanceByTimeOptions {
  /// Where the profile runs: the sample and every parameter and buffer of the module must be
  /// on this device (nothing is moved).
  Device device = Device::cpu(0);
  /// Untimed passes over all layers first (first-touch page faults, caches, lazy set-up).
  int warmup = 2;
  /// Timed passes; a layer's cost is the median of its `repetitions` times, which a
  /// descheduled thread on a busy machine does not move much.
  int repetitions = 5;
};

/// Per-layer forward + backward time in nanoseconds (steady clock), as the planner's profile
/// times layers (time_layers, pipeline/layer_timing.h): every layer's forward, then every
/// backward from the last layer to the first, as a step runs them (on a GPU each part queued
/// 8 times between two synchronisations); F and B each the median over options.repetitions
/// passes after options.warmup untimed ones. `sample` is one micro-batch: layer 0 gets it,
/// layer i gets layer i-1's output, detached and requiring grad exactly when that output did.
/// The backward of a layer runs from ones at every output that requires grad (torchgpipe's
/// profile_times started from the outputs' values; the values do not change the work); a
/// layer whose outputs do not require grad (no parameters, input without grad) is timed
/// forward only. Leaves the module as it was (Note [Profiling leaves the module as it
/// was]).
/// Throws std::invalid_argument for an empty module, an undefined sample, a sample or a
/// parameter/buffer not on options.device (naming both devices and the tensor),
/// warmup < 0 or repetitions <= 0 (naming the value); and whatever a layer throws.
std::vector<int64_t> profile_times(nn::Sequential& module, const nn::Tensors& sample,
                                   const BalanceByTimeOptions& options = {});

/// block_partition(profile_times(module, sample, options), partitions): a balance whose
/// slowest stage is as fast as the profile allows. Throws what block_partition and
/// profile_times throw; the partition counts are checked before anything runs.
std::vector<int> balance_by_time(int partitions, nn::Sequential& module, const Tensor& sample,
                                 const BalanceByTimeOptions& options = {});
std::vector<int> balance_by_time(int partitions, nn::Sequential& module,
                                 const nn::Tensors& sample,
                                 const BalanceByTimeOptions& options = {});

// ---- by size ----

struct BalanceBySizeOptions {
  /// Where the profile runs; sample, parameters and buffers must be on it. Its Allocator's
  /// byte counters (tensor/allocator.h) measure the activations, so nothing else may
  /// allocate on this device during the profile.
  Device device = Device::cpu(0);
  /// The sample is a mini-batch; the profile runs its first micro-batch, sample.chunk(chunks)[0]
  /// (torch.chunk: the largest one), as the Pipe will.
  int chunks = 1;
  /// Bytes charged per parameter byte: the parameter itself, its gradient and the optimizer
  /// state. torchgpipe's guidance: 2-3 for SGD (weights, grads, momentum), 4-5 for Adam
  /// (weights, grads, two moments). Must be finite and >= 0.
  double param_scale = 2.0;
};

/// What profile_sizes measures for one layer.
struct LayerSize {
  /// Bytes the layer's forward leaves allocated on the device for one micro-batch: its
  /// outputs plus whatever its autograd nodes saved (temporaries freed within the forward do
  /// not count; the layer's input is counted under the previous layer, which produced it).
  /// Exact: the Allocator's allocated() after minus before.
  int64_t activation_bytes = 0;
  /// The highest allocated() during the forward minus allocated() before it (>= activation_bytes).
  int64_t peak_bytes = 0;
  /// Σ nbytes() over the layer's parameters.
  int64_t parameter_bytes = 0;
  /// activation_bytes + round(param_scale · parameter_bytes): the cost balance_by_size splits.
  int64_t cost = 0;
};

/// Per-layer memory of one micro-batch (see LayerSize), forward only, in training mode with
/// gradient recording on, layer i fed layer i-1's detached output (requiring grad exactly
/// when that output did). Leaves the module as it was (Note [Profiling leaves the module as
/// it was]); the device's peak() counter is reset by the profile.
/// Throws std::invalid_argument for an empty module, an undefined or rank-0 sample, a sample
/// or a parameter/buffer not on options.device (naming both devices and the tensor),
/// chunks <= 0, a negative or non-finite param_scale (naming the value); and whatever a layer
/// throws.
std::vector<LayerSize> profile_sizes(nn::Sequential& module, const nn::Tensors& sample,
                                     const BalanceBySizeOptions& options = {});

/// block_partition of profile_sizes(...)[i].cost: a balance whose fullest stage is as small
/// as the profile allows. Throws what block_partition and profile_sizes throw; the partition
/// counts are checked before anything runs.
std::vector<int> balance_by_size(int partitions, nn::Sequential& module, const Tensor& sample,
                                 const BalanceBySizeOptions& options = {});
std::vector<int> balance_by_size(int partitions, nn::Sequential& module,
                                 const nn::Tensors& sample,
                                 const BalanceBySizeOptions& options = {});

}  // namespace pipewright::pipeline
