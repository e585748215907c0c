// PipeBackward: the autograd node that turns the user's loss.backward() into the pipeline's
// backward (torchgpipe's trick, without phony tensors).
//
// Pipe::forward runs the F prefix of the schedule and gathers the last stage's outputs into
// fresh tensors (cat). Those outputs get this node as grad_fn. Its inputs (edges) are the
// user's inputs and every parameter of the model: the output really is a function of them,
// and a node with at least one valid edge is what the engine applies.
//
//   x ──┐                       ┌─ loss.backward()
//   W₀ ─┤                       │   engine reaches PipeBackward.apply(dOut):
//   W₁ ─┼─► PipeBackward ─► out ┘     split dOut per micro-batch -> last stage's B inputs
//   ... ┘                             run the step's remaining actions (R, B) on the workers
//                                     gather stage 0's input gradients -> dx
//
// Parameter gradients are accumulated into .grad by each cell's own backward on its worker
// (per-cell tapes), so apply() returns undefined for the parameter edges; it returns the
// input gradients for the user's inputs. The node owns the Step (activations and graphs of
// every cell): dropping the output without backward frees them. A backward with
// retain_graph keeps them, and the next backward runs the pipeline's backward again (Note
// [Backward through a Pipe, again]); a second backward without it, a backward after a failed
// one, or after the Pipe was destroyed, throws std::logic_error.
//
// Note [Backward through a Pipe, again]
// torch semantics: backward(retain_graph = true) keeps every saved tensor, and each later
// backward through the same graph accumulates into .grad once more. The engine tells apply()
// whether it retains (autograd::retains_graph()); the node then keeps its Step and asks
// every cell to keep its graph (Cell::set_retain_graph), instead of freeing each as its B
// ends. The next apply() runs the same B actions again, without the R actions: a
// checkpointed cell's recomputed graph is among those kept. The engine releases the node
// (release_saved) after the first backward that does not retain, which drops the Step.
//
// Zero-bubble's B/W split asks twice within one backward (defer_weight_grads): first for the
// inputs' gradients, then, from the WeightGradQueue, for the parameters'. One run of the
// pipeline gives both, so the second call finds weights_done_ set and returns nothing.
#pragma once

#include <memory>
#include <vector>

#include "autograd/node.h"
#include "pipeline/microbatch.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/step.h"

namespace pipewright::pipeline {

class Runtime;
class TiedParameters;

class PipeBackward final : public autograd::Node {
 public:
  /// `actions`: what remains of the schedule per worker after the forward phase.
  /// `inputs`: the user's inputs (the first node inputs; the parameters follow).
  /// `output_dims[k]`: the dim (>= 0) gathered output k was concatenated on;
  /// `output_sizes[k][j]`: its size there that came from micro-batch j.
  /// `recorded[r]`: the gathered output that is this node's output r (the floating ones).
  /// `tied`: the Pipe's tied parameters, whose gradients the backward sums (Note [Tied
  /// parameters], tied_parameters.h).
  PipeBackward(std::weak_ptr<Runtime> runtime, std::shared_ptr<Step> step,
               std::vector<std::vector<Action>> actions, std::vector<InputInfo> inputs,
               std::vector<int> output_dims, std::vector<std::vector<int64_t>> output_sizes,
               std::vector<size_t> recorded, std::shared_ptr<const TiedParameters> tied);

  const char* name() const override { return "PipeBackward"; }
  nn::Tensors apply(const nn::Tensors& grad_outputs,
                            const std::vector<bool>& wanted) override;
  void release_saved() override;

 private:
  std::weak_ptr<Runtime> runtime_;
  std::shared_ptr<Step> step_;
  std::vector<std::vector<Action>> actions_;
  std::vector<InputInfo> inputs_;
  std::vector<int> output_dims_;
  std::vector<std::vector<int64_t>> output_sizes_;
  std::vector<size_t> recorded_;
  std::shared_ptr<const TiedParameters> tied_;
  bool weights_done_ = false;  // the last run's parameter gradients were not asked for yet
};

}  // namespace pipewright::pipeline
