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
//            its output (what a cut here sends: narrowed under a 16-bit policy, the
//            message bytes), the bytes its forward keeps for the backward
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

#include "autograd/precision.h"
#include "nn/sequential.h"
#include "pipeline/planner/cuts.h"
#include "pipeline/planner/model_profile.h"
#include "pipeline/step.h"
#include "tensor/tensor.h"

namespace pipewright::pipeline {

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
  /// The precision policy the Pipe will run (PipeOptions::precision): every layer runs
  /// under it, its output rounded as a Sequential rounds it, the parameters' working copies
  /// made by the first forward at each size (so they count as what a step's first forward
  /// keeps until the step ends).
  autograd::Precision precision = autograd::Precision::kFloat32;
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
/// the threads, the BatchNorm mode, the precision and the process's float32 matmul precision
/// (tensor/matmul_precision.h: TF32 times a GPU's products otherwise). A cached profile is
/// used only when they match.
std::string profile_fingerprint(const nn::Sequential& model, const Tensor& input,
                                const Tensor& target, int threads, bool deferred_batch_norm,
                                autograd::Precision precision = autograd::Precision::kFloat32);

/// Where a profile of `model` runs: the device of its parameters and buffers (the input's
/// when it has none). Throws std::invalid_argument naming two tensors on different devices.
Device profile_device(const nn::Sequential& model, const Tensor& input);

/// The skips of `model` in SkipLayout's route order (cuts.h: where a stage may end). Throws
/// what verify_skippables throws.
std::vector<SkipSpan> skip_spans(const nn::Sequential& model);

}  // namespace pipewright::pipeline
