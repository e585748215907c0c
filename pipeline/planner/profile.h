// ModelProfile: what each layer of a Sequential costs, measured once and cached to a file, so
// that the planner (planner.h) can weigh cuts, schedules, chunks and recompute placements
// without running the model again.
//
// Per layer (a child of the Sequential), for a micro-batch of n rows:
//   time     F (recorded forward), B (whole backward), I and W (its input-grad and
//            weight-grad halves, autograd's B/W split), R (recompute: a recorded forward
//            again); each an affine function of n fitted to two micro-batch sizes
//   memory   parameter bytes (+ as many for their gradients; the optimizer state is
//            PlanOptions::optimizer_state_factor times the parameter bytes), the bytes of
//            its output (what a cut here sends), the bytes its forward keeps for the backward
//            ("full" activations) and the bytes a checkpointed cell keeps instead (its input),
//            each exact at the two sizes and affine in n
// Costs of a range of layers (a stage) are sums: Note [Additive stage costs] in stage_estimate.cc
// says which are exact and which are estimates; the planner measures the stages of the plans
// it returns exactly (stage_probe.h).
//
// The loss is profiled as one more entry, `loss`, run on the last layer's output. The
// planner caches a profile (with its exact stage measurements) in a file: PlanOptions::cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/sequential.h"
#include "pipeline/step.h"
#include "tensor/tensor.h"

namespace pipewright::pipeline {

/// y = fixed + per_row · rows, fitted through two measured sizes (exact at both).
struct Affine {
  double fixed = 0;
  double per_row = 0;

  double at(int64_t rows) const { return fixed + per_row * static_cast<double>(rows); }
  /// at(rows) rounded to whole bytes, never negative.
  int64_t bytes(int64_t rows) const;
  /// The line through (r1, y1) and (r2, y2); a constant when r1 == r2.
  static Affine through(int64_t r1, double y1, int64_t r2, double y2);
};

/// One layer's costs, for a micro-batch of `rows` rows (see the file comment).
struct LayerProfile {
  std::string name;               // the layer's str(), to recognise a stale cache
  // microseconds
  Affine forward_us, backward_us, backward_input_us, backward_weight_us;
  // bytes
  int64_t parameter_bytes = 0;    // Σ nbytes over the layer's parameters that require grad
  int64_t buffer_bytes = 0;       // Σ nbytes over its buffers (BatchNorm's running statistics)
  Affine output_bytes;            // the layer's outputs
  Affine activation_bytes;        // kept after a recorded forward, beyond its output (saved
                                  // tensors), with the input counted where it is kept
  Affine forward_peak_bytes;      // the forward's highest allocation above what it starts with
  Affine backward_peak_bytes;     // the backward's, its input gradient included
  Affine first_forward_bytes;     // kept for the rest of the step by the first forward only
                                  // (deferred BatchNorm's running sums)
  bool frees_input = false;       // its input is freed once its forward has run (nothing kept it)
};

struct ModelProfile {
  std::vector<LayerProfile> layers;  // one per child of the Sequential
  LayerProfile loss;                 // the loss on the last layer's output (no parameters)
  int64_t input_bytes_per_row = 0;   // the first stage's input (copied to its device in F)
  int64_t target_bytes_per_row = 0;  // the last stage's targets (copied there at step start)
  int64_t loss_bytes = 0;            // one loss value (kept until the step ends)
  int64_t batch_rows = 0;            // N of the sample mini-batch
  int threads = 1;                   // intra-op threads each layer was timed with
  double copy_bytes_per_us = 0;      // a copy between two of the devices
  Affine input_copy_us;              // stage 0's micro-batch copied from where the sample is
                                     // (the host, for a data loader's batch) to the device
  std::string fingerprint;           // the model, sample shapes and threads (profile_model)

  int num_layers() const { return static_cast<int>(layers.size()); }
};

struct ProfileOptions {
  /// The micro-batch sizes timed (rows); the affine fits go through the smallest and the
  /// largest. Empty: the sample's whole batch and its 16th (at least 1 row).
  std::vector<int64_t> rows = {};
  /// Intra-op threads per layer while timing: the budget each worker of the planned Pipe
  /// gets (0: max(1, hardware_threads() / workers), as PipeOptions::threads_per_worker).
  int threads = 0;
  int workers = 1;
  int warmup = 2;       // untimed passes
  int repetitions = 5;  // timed passes; each time is the median
  /// Deferred BatchNorm as the Pipe will run it (PipeOptions::deferred_batch_norm).
  bool deferred_batch_norm = false;
};

/// Measures `model` on one sample mini-batch (`input` [N, ...] and `target` [N, ...], any
/// device; the model's parameters on one device, where the profile runs). Leaves the model
/// as it was (Note [Profiling leaves the module as it was], balance.h): parameters, .grad,
/// buffers, modes and the caller's generator. Throws std::invalid_argument for an empty
/// model, undefined or rank-0 tensors, input and target with different N, parameters on
/// several devices, a non-positive row count, warmup < 0 or repetitions < 1 (naming the
/// value); and whatever the layers and loss_fn throw.
ModelProfile profile_model(nn::Sequential& model, const Tensor& input, const Tensor& target,
                           const LossFn& loss_fn, const ProfileOptions& options = {});

/// What ModelProfile::fingerprint holds: the model's text, the sample's shapes and dtypes,
/// the threads and the BatchNorm mode. A cached profile is used only when they match.
std::string profile_fingerprint(const nn::Sequential& model, const Tensor& input,
                                const Tensor& target, int threads, bool deferred_batch_norm);

/// Where a profile of `model` runs: the device of its parameters and buffers (the input's
/// when it has none). Throws std::invalid_argument naming two tensors on different devices.
Device profile_device(const nn::Sequential& model, const Tensor& input);

}  // namespace pipewright::pipeline
