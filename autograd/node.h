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
