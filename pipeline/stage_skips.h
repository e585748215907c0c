// StageSkips: the SkipTracker a stage's cell installs while the stage runs (F and R).
//
// Note [Portals]
// A skip that crosses stages becomes one extra input of the popping cell and one extra output
// of the stashing cell, so the per-cell tape (Note [Per-cell tapes], cell.h) handles it like
// any activation:
//
//   stage 0, cell j:  inputs (x)        -> outputs (h, stash 'x')  ── portal 'x' ──┐
//   stage 1, cell j:  inputs (h)        -> outputs (h')             (never sees 'x') │
//   stage 2, cell j:  inputs (h', 'x') <──────────────────────────────────────────────┘
//                     -> outputs (y)
//
// Forward: stage 0 sends 'x' straight to stage 2's device (one message, one copy, Transport
// key with `skip` set); stage 2 receives it before its forward and hands it to the layer that
// pops it. Backward: stage 2's cell returns a gradient for every input, 'x' included, and
// sends that one straight back to stage 0, whose cell takes it as the gradient of its extra
// output. Checkpointed cells keep the popped tensor as an input until their recompute, which
// pops it again from here; a recompute stashes again, and those stashes become the graph's
// outputs (nothing is sent twice).
//
// Within a stage, a skip stashed and popped on the same stage never leaves the forward.
#pragma once

#include <map>
#include <vector>

#include "nn/skip.h"
#include "pipeline/skip_layout.h"

namespace pipewright::pipeline {

class StageSkips final : public nn::SkipTracker {
 public:
  /// `popped[k]` is the tensor of route layout.portals_in(stage)[k].
  StageSkips(const SkipLayout& layout, int stage, int microbatch, nn::Tensors popped);

  /// Local skips are kept until popped; skips for later stages are collected for sending.
  /// Throws std::logic_error for a skip routed elsewhere or stashed twice in one forward.
  void stash(const nn::Module& layer, const nn::SkipKey& key, const Tensor& tensor) override;
  /// Throws std::logic_error for a skip not popped on this stage, popped twice, or (local)
  /// not stashed yet.
  Tensor pop(const nn::Module& layer, const nn::SkipKey& key) override;

  /// After the stage's forward: the tensors for layout.portals_out(stage), in order. Throws
  /// std::logic_error naming the layer when a declared skip was not stashed or not popped
  /// during the forward.
  nn::Tensors finish();

 private:
  std::string where() const;

  const SkipLayout& layout_;
  int stage_;
  int microbatch_;
  std::map<int, Tensor> in_;     // route -> popped tensor (consumed by pop)
  std::map<int, Tensor> local_;  // route -> stashed, not popped yet
  std::map<int, Tensor> out_;    // route -> stashed for a later stage
  std::vector<char> popped_;     // per route
};

}  // namespace pipewright::pipeline
