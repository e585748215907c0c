// Per-layer times of a chain of layers, measured in the order a training step runs them: the
// one timing under balance.h's profile_times (balance_by_time) and the planner's profile
// (pipeline/planner/profile.h).
//
// Note [Profiling in a step's order]
// A layer's backward in a step runs after the later layers' backwards, long after its own
// forward: its saved activations and weights have left the core's caches. Timed right after
// its forward, as each layer once was, a backward found them there, and the main job's step on
// two workers ran 6-12 % longer than the plan said (docs/BENCHMARKS.md, 2026-11-26 23:04). So
// a pass runs F through every layer, then B from the last layer to the first, then (when asked)
// the split halves on fresh graphs: every I from the last layer to the first, then every W.
//
// Note [Timing layers on a GPU]
// On the CPU a layer's time is its wall time. A GPU worker queues a layer's kernels and goes on
// to queue the next layer's while the device runs them, so inside a step a layer costs about
// the longer of its host time (launches, cuBLAS calls) and its device time, not their sum plus
// a wait for the device. Timed alone between two synchronisations, a small layer's time was
// mostly that wait: the main job's profile on an H200 put a step at 1.4x its measured time,
// and 2x with 24 micro-batches. So on a GPU each timed part (F, B, I, W) runs
// kDeviceRepeats times back to back between two synchronisations, on graphs made beforehand,
// and its time is the total over the repeats; the one wait is spread over them.
//
// Note [Skips in the profile]
// A profile runs a layer more than once per pass (its B/W split on a fresh graph, a GPU's
// repeats) and alone (the planner's memory pass), so a layer that pops a skip must find it
// again. ProfileSkipTracker stores as the default tracker does — the chain's pop takes the
// stashed tensor, graph and all — and remembers what was popped, detached (requires_grad as it
// was), for the layer's later runs: their backward then stops at the skip, as each layer's own
// backward stops at its detached input.
#pragma once

#include <functional>
#include <map>
#include <vector>

#include "nn/skip.h"
#include "nn/tensors.h"
#include "tensor/device.h"

namespace pipewright::pipeline {

/// Times each part runs back to back on a GPU (Note [Timing layers on a GPU]).
inline constexpr int kDeviceRepeats = 8;

/// A layer as a profile runs it: layer i-1's outputs (detached) to layer i's outputs.
using ProfiledLayer = std::function<nn::Tensors(const nn::Tensors&)>;

struct LayerTimingOptions {
  int warmup = 2;       // untimed passes first (first-touch faults, caches, lazy set-up)
  int repetitions = 5;  // timed passes; each part's time is the median over them
  /// Also time the backward's two halves, I and W (autograd's B/W split; the zero-bubble
  /// schedules run them apart).
  bool split_backward = true;
};

/// One layer's times in microseconds, each the median over the timed passes: F (a recorded
/// forward), B (its whole backward), and with split_backward I and W (else 0).
struct LayerTimes {
  double forward = 0, backward = 0, backward_input = 0, backward_weight = 0;
};

/// Times every layer of `layers` on `device`, in a step's order (Note [Profiling in a step's
/// order]; on a GPU Note [Timing layers on a GPU]), under a ProfileSkipTracker (Note [Skips in
/// the profile]). Each pass starts from `first_input()` (fresh tensors on `device`); layer i
/// gets layer i-1's outputs, detached, requiring grad exactly when they did. A layer's backward
/// starts from ones at every output that requires grad and computes the gradients of its
/// input and of `parameters[i]` (returned, not accumulated: the same work, no side effect);
/// its W half accumulates into their .grad, which it then clears. A layer whose outputs need
/// no gradient is timed forward only. Call under a ProfileStateGuard (profile_state.h): the
/// layers run in training mode with grad mode on. `parameters.size()` must equal
/// `layers.size()`. Throws std::invalid_argument for a size mismatch, warmup < 0 or
/// repetitions < 1 (naming the value); and whatever a layer throws.
std::vector<LayerTimes> time_layers(const std::vector<ProfiledLayer>& layers,
                                    const std::vector<nn::Tensors>& parameters,
                                    const std::function<nn::Tensors()>& first_input,
                                    Device device, const LayerTimingOptions& options = {});

/// The gradient a layer's outputs receive in a profile: ones where an output requires grad
/// (appended to `roots` and `grads`).
void roots_of(const nn::Tensors& outputs, nn::Tensors& roots, nn::Tensors& grads);

/// The defined tensors of `tensors` that require grad.
nn::Tensors requiring_grad(const nn::Tensors& tensors);

/// The skip tracker of a profile (Note [Skips in the profile]). Throws std::logic_error from
/// pop() for a skip no earlier layer stashed.
class ProfileSkipTracker final : public nn::SkipTracker {
 public:
  void stash(const nn::Module& layer, const nn::SkipKey& key, const Tensor& tensor) override;
  Tensor pop(const nn::Module& layer, const nn::SkipKey& key) override;

 private:
  std::map<nn::SkipKey, Tensor> stashed_, popped_;
};

}  // namespace pipewright::pipeline
