// backward(): runs recorded nodes in reverse (see Note [The graph is the tape] in node.h).
//
// Single-threaded per call and without global locks: different threads may run backward on
// different graphs (pipeline cells) at the same time. Parameters are accumulated (+=) into
// TensorImpl::grad like PyTorch; callers that run backward on graphs sharing a parameter
// from several threads at once must serialise those calls themselves (pipeline stages own
// disjoint parameters, so they never do).
#pragma once

#include <memory>
#include <vector>

#include "autograd/node.h"
#include "tensor/tensor.h"

namespace pipewright::autograd {

/// The deferred weight-gradient halves of one or more backward calls (zero-bubble's W).
/// Holds the nodes and what each keeps of its output gradients (Node::keep_for_weight_grads)
/// until run().
class WeightGradQueue {
 public:
  WeightGradQueue() = default;
  WeightGradQueue(const WeightGradQueue&) = delete;
  WeightGradQueue& operator=(const WeightGradQueue&) = delete;
  WeightGradQueue(WeightGradQueue&&) = default;
  WeightGradQueue& operator=(WeightGradQueue&&) = default;

  /// Computes every deferred parameter gradient, accumulates it into the leaves' .grad, and
  /// releases the saved tensors. The queue is empty afterwards.
  void run();
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }

  struct Item {
    std::shared_ptr<Node> node;
    std::vector<Tensor> kept;  // Node::keep_for_weight_grads of the output gradients
    std::vector<bool> wanted;  // the parameter inputs
    bool release = true;       // release the node's saved tensors after (false: retain_graph)
  };
  void push(Item item) { items_.push_back(std::move(item)); }

 private:
  std::vector<Item> items_;
};

struct BackwardOptions {
  /// When set, gradients of parameters (leaves not listed in `inputs`) are not computed now:
  /// the work is appended to this queue (B/W split). Default: computed now.
  WeightGradQueue* defer_weight_grads = nullptr;
  /// Keep saved tensors so backward can run again through the same graph.
  bool retain_graph = false;
};

/// Backpropagates from `outputs` with `grad_outputs` (one per output, same shape, dtype and
/// device; an undefined entry, or an empty list, means ones for a one-element output, else
/// throws).
/// Returns the gradients of `inputs` (leaves that require grad; undefined where no gradient
/// reached them) without touching their .grad; accumulates into .grad of every other leaf.
/// Throws std::invalid_argument on mismatched sizes/shapes (naming them), std::logic_error
/// when an output does not require grad or the graph was already freed.
std::vector<Tensor> backward(const std::vector<Tensor>& outputs,
                             const std::vector<Tensor>& grad_outputs,
                             const std::vector<Tensor>& inputs = {},
                             const BackwardOptions& options = {});

/// Whether the backward running on this thread keeps its graph (BackwardOptions::retain_graph
/// of the innermost backward() call, or of the queue item WeightGradQueue::run is applying);
/// false outside a backward. For nodes whose apply() runs backwards of their own
/// (pipeline::PipeBackward): they pass it on. torch's get_current_graph_task_keep_graph().
bool retains_graph();

/// The usual reason a tensor computed from one with autograd history has none, for error
/// messages (the engine's, the pipeline's loss check): Tensor's own methods record no history,
/// the functions of autograd/ do. One sentence, no trailing period.
extern const char* const kTensorMethodsRecordNoHistory;

}  // namespace pipewright::autograd
