// Node: one recorded differentiable op, and Edge: where its input gradients go.
//
// Note [The graph is the tape]
// A forward region (a pipeline cell: one micro-batch through one stage) records a node per
// differentiable op. Each output tensor holds its producing node (TensorImpl::grad_fn); each
// node holds an Edge per input: the node that produced that input, or the input itself when
// it is a leaf that requires grad (a parameter, or a cell's detached input). Nodes are
// numbered in creation order (sequence_nr), so visiting the nodes reachable from the outputs
// in decreasing sequence_nr is a valid reverse topological order: the region's tape, replayed
// backwards. The graph lives exactly as long as the outputs that reach it (like PyTorch), and
// a cell's graph is cut at its detached input, so each cell owns its own tape.
//
// Saved tensors are stored detached (no grad_fn), so a node never owns itself through an
// output it saved: no reference cycles.
//
// Note [Input-grad and weight-grad halves]
// apply() computes the gradients of the inputs selected by `wanted`. The engine asks for
// all inputs at once in an ordinary backward. For zero-bubble schedules it asks twice:
// first for the gradients flowing to other nodes and to the region's inputs (B: input-grad),
// later for the gradients of parameters (W: weight-grad), e.g. Linear: B computes
// dX = dY·W, W computes dW = dYᵀ·X and db = Σ dY.
//
// Note [Weight gradients accumulated in place]
// A parameter's gradient normally comes back from apply() as a fresh tensor that the engine
// then adds into the leaf's .grad: one allocation and one extra pass per backward, which a
// pipeline pays once per micro-batch. apply_into_grad() lets a node skip both: for the inputs
// the engine marks `into_grad` (parameters: leaves whose gradient goes into .grad, never a
// region input whose gradient is returned), a node may add its gradient straight into the
// leaf's existing .grad (Linear: a GEMM with beta = 1) and return an undefined tensor for it.
// It may do so only when grad_buffer.h's grad_to_accumulate_into() allows it (Note [Never
// alias a gradient]); otherwise it returns the gradient as apply() would. The sum is the same
// (.grad += g, like PyTorch's AccumulateGrad), only rounded in a different order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace pipewright::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> fn;            // the node that produced this input, or
  std::shared_ptr<TensorImpl> leaf;    // the input itself, a leaf that requires grad
  uint32_t output_nr = 0;              // which output of `fn`

  /// False when the input needs no gradient.
  bool valid() const { return fn != nullptr || leaf != nullptr; }
};

class Node {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// The op's name, e.g. "LinearBackward".
  virtual const char* name() const = 0;

  /// Gradients of the inputs selected by `wanted` (size num_inputs()), given one gradient per
  /// output (undefined entries mean zero). Returns num_inputs() tensors, undefined where not
  /// wanted. Each gradient has its input's shape, dtype and device.
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs,
                                    const std::vector<bool>& wanted) = 0;

  /// apply(), except that for an input with into_grad[i] set (a parameter leaf; implies
  /// wanted[i]) the node may add its gradient straight into the leaf's .grad and return an
  /// undefined tensor for it (Note [Weight gradients accumulated in place]). The default
  /// accumulates nothing itself: it returns apply(grad_outputs, wanted).
  virtual std::vector<Tensor> apply_into_grad(const std::vector<Tensor>& grad_outputs,
                                              const std::vector<bool>& wanted,
                                              const std::vector<bool>& /*into_grad*/) {
    return apply(grad_outputs, wanted);
  }

  /// Whether zero-bubble's W may take this node's parameter gradients (Note [What W takes] in
  /// engine.cc). True by default and for the products, whose weight gradient is a GEMM as
  /// costly as B's; false for a node whose parameter gradient is a reduction over what B
  /// reads anyway (LayerNorm, BatchNorm, Embedding): it computes that in B, and the queue
  /// keeps nothing of it until W.
  virtual bool defers_weight_grads() const { return true; }

  /// Zero-bubble's W half (Note [Input-grad and weight-grad halves]). When the engine defers
  /// the gradients of the inputs marked `later` (parameters), it asks the node once, right
  /// after B, what to keep of its output gradients until W; W then calls
  /// apply_weight_grads(kept, later), which returns (or adds into .grad, as apply_into_grad
  /// may) the gradients of exactly those inputs. The defaults keep grad_outputs as they are
  /// and run apply_into_grad(kept, later, later). A node may keep less (Note [What a deferred
  /// W keeps] in linear.cc) when W's result stays bitwise the undeferred backward's.
  virtual std::vector<Tensor> keep_for_weight_grads(std::vector<Tensor> grad_outputs,
                                                    const std::vector<bool>& /*later*/) {
    return grad_outputs;
  }
  /// The output gradients B takes when W is deferred, asked after keep_for_weight_grads()
  /// with what it kept and the inputs B makes gradients for now (`now`). A node whose B takes
  /// dY as W keeps it (rounded to its operands' 16-bit dtype) hands B that copy, so dY is
  /// rounded once per micro-batch, not twice (Note [What a deferred W keeps] in linear.cc);
  /// B's results must stay bitwise those from grad_outputs. Default: grad_outputs.
  virtual std::vector<Tensor> grad_outputs_for_now(const std::vector<Tensor>& grad_outputs,
                                                   const std::vector<Tensor>& /*kept*/,
                                                   const std::vector<bool>& /*now*/) {
    return grad_outputs;
  }
  virtual std::vector<Tensor> apply_weight_grads(const std::vector<Tensor>& kept,
                                                 const std::vector<bool>& later) {
    return apply_into_grad(kept, later, later);
  }

  /// Drops the saved tensors (after the last apply). A later apply() must throw
  /// std::logic_error("... backward through a graph a second time ...").
  virtual void release_saved() = 0;

  size_t num_inputs() const { return next_edges_.size(); }
  uint32_t num_outputs() const { return num_outputs_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  bool released() const { return released_; }
  /// Throws the "second time" std::logic_error naming this node (and retain_graph) when
  /// released(). Public so that the engine can check a whole graph before running any of it.
  void check_not_released() const;

 protected:
  void mark_released() { released_ = true; }

 private:
  friend class NodeRecorder;
  std::vector<Edge> next_edges_;
  uint32_t num_outputs_ = 1;
  uint64_t sequence_nr_;
  bool released_ = false;
};

/// Whether any of `inputs` requires grad and grad mode is on: then the op must record a node.
bool should_record(const std::vector<Tensor>& inputs);

/// Connects a node to its inputs and outputs: sets the node's edges from `inputs` (an
/// undefined or non-requiring input gets an invalid edge), and marks each output as
/// requires_grad with grad_fn = node, output_nr = its position.
/// Call only when should_record(inputs).
class NodeRecorder {
 public:
  static void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
                     const std::vector<Tensor*>& outputs);
};

/// A detached copy of the handle for saving in a node (shares storage, no grad_fn).
inline Tensor save(const Tensor& t) { return t.defined() ? t.detach() : Tensor(); }

}  // namespace pipewright::autograd
