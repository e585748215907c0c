// SkipLayout: where each skip connection of a model starts and ends once the model is cut
// into stages, and the checks torchgpipe's verify_skippables makes.
//
//   children   0        1        2        3        4          balance {2, 2, 1}
//              Save(x)  Linear   ReLU     Linear   AddSaved(x)
//   stage      0                 1                 2
//
//   route 0: 'x' stashed by child 0 on stage 0, popped by child 4 on stage 2
//            -> a portal: stage 0 sends the tensor straight to stage 2 (and stage 2 sends its
//               gradient straight back); stage 1 never sees it.
//
// A skip stashed and popped on the same stage is *local*: the tensor stays inside the stage's
// forward (and its gradient inside the stage's backward); it needs no message.
//
// How the runtime uses a layout (Note [Portals], stage_skips.h): a stage's cell takes the
// tensors popped from portals as extra inputs after its regular ones, and returns the tensors
// it stashes for later stages as extra outputs after its regular ones. The per-cell tape
// then carries their gradients like any other input's or output's.
#pragma once

#include <string>
#include <vector>

#include "nn/sequential.h"
#include "nn/skip.h"
#include "pipeline/schedule/schedule.h"

namespace pipewright::pipeline {

struct SkipRoute {
  nn::SkipKey key;
  size_t stash_child = 0;   // top-level child of the Sequential holding the stashing layer
  size_t pop_child = 0;
  int stash_stage = 0;
  int pop_stage = 0;
  std::string stash_layer;  // the layers' str(), for messages
  std::string pop_layer;

  bool local() const { return stash_stage == pop_stage; }
  /// "'x' from stage 0 (child 1, Save()) to stage 2 (child 4, AddSaved())".
  std::string str() const;
};

class SkipLayout {
 public:
  /// No skips.
  SkipLayout() = default;
  /// The routes of `module`'s skips cut by `balance` (Σ balance = module.size(); call
  /// verify_balance first). Throws what verify_skippables throws.
  SkipLayout(const nn::Sequential& module, const std::vector<int>& balance);

  bool empty() const { return routes_.empty(); }
  const std::vector<SkipRoute>& routes() const { return routes_; }
  const SkipRoute& route(int r) const { return routes_.at(static_cast<size_t>(r)); }
  /// The route of `key`, or -1.
  int find(const nn::SkipKey& key) const;
  /// Routes popped on `stage` from a portal (stashed on an earlier stage), in route order:
  /// the cell's extra inputs.
  const std::vector<int>& portals_in(int stage) const;
  /// Routes stashed on `stage` for a later stage, in route order: the cell's extra outputs.
  const std::vector<int>& portals_out(int stage) const;
  /// One SkipEdge per route that crosses stages (Schedule::skips), in route order.
  std::vector<SkipEdge> edges() const;

 private:
  std::vector<SkipRoute> routes_;
  std::vector<std::vector<int>> in_;   // [stage]
  std::vector<std::vector<int>> out_;  // [stage]
};

/// Checks that every skip of `module` is stashed by exactly one layer and popped by exactly
/// one later layer. Throws std::invalid_argument listing every problem, one per line: a
/// stash never popped, a pop never stashed (with a hint when the same name exists in another
/// namespace), a skip stashed or popped by two layers (with the nn::isolate hint), a pop
/// that runs before its stash.
void verify_skippables(const nn::Sequential& module);

}  // namespace pipewright::pipeline
