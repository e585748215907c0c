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
// every cell): dropping the output without backward frees them. A second backward, or a
// backward after the Pipe was destroyed, throws std::logic_error.
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
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs,
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
};

}  // namespace pipewright::pipeline
