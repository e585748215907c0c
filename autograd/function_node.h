// FunctionNode and the helpers every differentiable op is written with.
//
// A differentiable op in this folder has three parts:
//   1. the forward: the non-differentiable tensor op (tensor/ops.h) on the inputs;
//   2. a Node subclass (derived from FunctionNode) whose backward() computes the input
//      gradients selected by `wanted` from the saved tensors;
//   3. record_op(): when should_record(inputs), builds that node and connects it.
// Example (exp): y = ops::exp(x); saved y; backward: dx = g * y.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "autograd/node.h"
#include "tensor/tensor.h"

namespace pipewright::autograd {

/// A Node with saved tensors (stored detached, see save()), released by release_saved().
/// Subclasses implement backward(); apply() refuses to run after the release.
class FunctionNode : public Node {
 public:
  explicit FunctionNode(std::vector<Tensor> saved = {}) {
    saved_.reserve(saved.size());
    for (const Tensor& t : saved) saved_.push_back(save(t));
  }

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs,
                            const std::vector<bool>& wanted) final {
    check_not_released();
    return backward(grad_outputs, wanted);
  }

  std::vector<Tensor> apply_into_grad(const std::vector<Tensor>& grad_outputs,
                                      const std::vector<bool>& wanted,
                                      const std::vector<bool>& into_grad) final {
    check_not_released();
    return backward_into_grad(grad_outputs, wanted, into_grad);
  }

  std::vector<Tensor> apply_weight_grads(const std::vector<Tensor>& kept,
                                         const std::vector<bool>& later) final {
    check_not_released();
    return backward_weight(kept, later);
  }

  void release_saved() final {
    std::vector<Tensor>().swap(saved_);
    mark_released();
  }

 protected:
  /// Same contract as apply(): one gradient per input, undefined where not wanted. A
  /// single-output node may assume grad_outputs[0] is defined (the engine skips a node that
  /// received no gradient at all).
  virtual std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs,
                                       const std::vector<bool>& wanted) = 0;
  /// Same contract as apply_into_grad(); override it in an op that can accumulate a
  /// parameter's gradient in place (Note [Weight gradients accumulated in place]).
  virtual std::vector<Tensor> backward_into_grad(const std::vector<Tensor>& grad_outputs,
                                                 const std::vector<bool>& wanted,
                                                 const std::vector<bool>& /*into_grad*/) {
    return backward(grad_outputs, wanted);
  }
  /// W from what keep_for_weight_grads() kept (Node::apply_weight_grads). Override it
  /// together with keep_for_weight_grads(); the default is backward_into_grad(kept, later,
  /// later).
  virtual std::vector<Tensor> backward_weight(const std::vector<Tensor>& kept,
                                              const std::vector<bool>& later) {
    return backward_into_grad(kept, later, later);
  }
  const Tensor& saved(size_t i) const { return saved_[i]; }

 private:
  std::vector<Tensor> saved_;
};

/// When should_record(inputs): builds the node with make_node() (so nothing is saved when
/// nothing is recorded) and connects it to inputs and outputs.
template <class MakeNode>
void record_op(const std::vector<Tensor>& inputs, const std::vector<Tensor*>& outputs,
               MakeNode&& make_node) {
  if (!should_record(inputs)) return;
  std::shared_ptr<Node> node = make_node();
  NodeRecorder::record(node, inputs, outputs);
}

/// The dtype and device of `t`, for allocating tensors like it.
inline TensorOptions options_of(const Tensor& t) { return {.dtype = t.dtype(), .device = t.device()}; }

/// `out` itself, or a new handle to the same view when `out` shares its impl with `in` (a view
/// op may return its input unchanged, and an op output needs its own autograd fields).
Tensor own_handle(const Tensor& out, const Tensor& in);

/// Sums a gradient of the broadcast (larger) shape back to `shape`, the shape of an operand
/// that was broadcast: equal shapes -> g; one element or trailing dims -> g viewed as
/// [rest, numel(shape)] summed over its first dim. The inverse of ops.h's broadcasting.
Tensor reduce_to_shape(const Tensor& g, const Shape& shape);

/// The inverse of a reduction over `dim` of a tensor of `shape`: repeats g (shape with `dim`
/// removed or kept as 1) along `dim`, giving `shape`.
Tensor expand_along(const Tensor& g, const Shape& shape, int64_t dim);

/// t as a contiguous 2-D [numel / last, last] tensor: the row layout the softmax and
/// cross-entropy kernels take (tensor/kernels.h kernels assume contiguous inputs).
Tensor as_rows(const Tensor& t);

}  // namespace pipewright::autograd
