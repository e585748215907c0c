// backward() and WeightGradQueue::run() (see engine.h, and node.h for the graph model).
//
//   outputs ──seed──► slots of (node, output_nr) ──apply──► slots of the next nodes ... ──► leaves
//
// One backward call is a GraphTask, private to the calling thread: it finds every node
// reachable from the outputs, sorts them by decreasing sequence_nr (a reverse topological
// order, Note [The graph is the tape]), and runs each once, after every gradient flowing into
// it has been summed. Nothing here is shared between threads except the nodes' own data.
#include "autograd/engine.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_buffer.h"
#include "autograd/grad_mode.h"
#include "tensor/ops.h"

namespace pipewright::autograd {
namespace {

thread_local bool t_retain_graph = false;  // retains_graph()

/// Sets retains_graph() for a scope, restoring the outer value (nested backwards).
class RetainGraphScope {
 public:
  explicit RetainGraphScope(bool retain) : outer_(t_retain_graph) { t_retain_graph = retain; }
  ~RetainGraphScope() { t_retain_graph = outer_; }
  RetainGraphScope(const RetainGraphScope&) = delete;
  RetainGraphScope& operator=(const RetainGraphScope&) = delete;

 private:
  bool outer_;
};

std::string describe(const Tensor& t) {
  return "shape " + t.shape().str() + ", " + dtype_name(t.dtype()) + ", " + t.device().str();
}

/// The gradient to start from for output `i`: the given one (checked), or ones for a
/// one-element output.
Tensor initial_grad(const Tensor& output, const Tensor& grad, size_t i) {
  const std::string which = "backward: output " + std::to_string(i);
  if (!grad.defined()) {
    if (output.numel() != 1) {
      throw std::invalid_argument(which + " has " + describe(output) +
                                  ": a gradient can be implied (ones) only for a one-element "
                                  "output; pass grad_outputs");
    }
    return Tensor::ones(output.shape(), {.dtype = output.dtype(), .device = output.device()});
  }
  if (grad.shape() != output.shape() || grad.dtype() != output.dtype() ||
      grad.device() != output.device()) {
    throw std::invalid_argument(which + " has " + describe(output) + " but its gradient has " +
                                describe(grad));
  }
  return grad;
}

class GraphTask {
 public:
  GraphTask(const std::vector<Tensor>& inputs, const BackwardOptions& options)
      : options_(options) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& t = inputs[i];
      const std::string which = "backward: inputs[" + std::to_string(i) + "]";
      if (!t.defined() || !t.requires_grad()) {
        throw std::invalid_argument(which + " does not require grad");
      }
      if (t.grad_fn() != nullptr) {
        throw std::invalid_argument(which + " is not a leaf (it was produced by " +
                                    t.grad_fn()->name() +
                                    "); pass the detached tensor the region started from");
      }
      input_leaves_.insert(t.impl());
    }
  }

  /// Puts each output's gradient into the slot it flows to.
  void seed(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Tensor& out = outputs[i];
      if (!out.defined() || !out.requires_grad()) {
        throw std::logic_error(
            "backward: output " + std::to_string(i) +
            (out.defined() ? " (" + describe(out) + ")" : std::string(" (undefined)")) +
            " does not require grad: nothing it was computed from requires grad, it was "
            "computed under NoGradGuard, or an operation on the way dropped the history (" +
            kTensorMethodsRecordNoHistory + ")");
      }
      Tensor g = initial_grad(out, grad_outputs.empty() ? Tensor() : grad_outputs[i], i);
      if (out.grad_fn() != nullptr) {
        slot_of(out.grad_fn(), out.impl()->output_nr).add(std::move(g));
        roots_.push_back(out.grad_fn());
      } else {
        leaf_slot(out.impl_ptr()).add(std::move(g));  // backward from a leaf itself
      }
    }
  }

  /// Every node reachable from the roots, latest first; throws if any was already released.
  void discover() {
    std::unordered_set<Node*> seen;
    std::vector<std::shared_ptr<Node>> stack = roots_;
    while (!stack.empty()) {
      std::shared_ptr<Node> node = std::move(stack.back());
      stack.pop_back();
      if (!seen.insert(node.get()).second) continue;
      node->check_not_released();
      for (const Edge& e : node->next_edges()) {
        if (e.fn != nullptr) stack.push_back(e.fn);
      }
      order_.push_back(std::move(node));
    }
    std::sort(order_.begin(), order_.end(), [](const auto& a, const auto& b) {
      return a->sequence_nr() > b->sequence_nr();
    });
  }

  void run() {
    for (const std::shared_ptr<Node>& node : order_) run_node(node);
  }

  /// Results for `inputs`; every other leaf's gradient goes into its .grad.
  std::vector<Tensor> finish(const std::vector<Tensor>& inputs) {
    std::vector<Tensor> results(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto it = leaf_index_.find(inputs[i].impl());
      if (it == leaf_index_.end()) continue;  // no gradient reached it
      GradSlot& slot = leaves_[it->second].second;
      results[i] = slot.defined() ? slot.take() : results[first_index(inputs, i)];
    }
    for (auto& [leaf, slot] : leaves_) {
      if (slot.defined() && input_leaves_.count(leaf.get()) == 0) {
        accumulate_into_grad(*leaf, slot.take());
      }
    }
    return results;
  }

 private:
  /// The first position of inputs[i] in `inputs` (a leaf listed twice gets its gradient twice).
  static size_t first_index(const std::vector<Tensor>& inputs, size_t i) {
    size_t j = 0;
    while (!inputs[j].is_same(inputs[i])) ++j;
    return j;
  }

  GradSlot& slot_of(const std::shared_ptr<Node>& node, uint32_t output_nr) {
    std::vector<GradSlot>& slots = node_slots_[node.get()];
    if (slots.empty()) slots.resize(node->num_outputs());
    return slots[output_nr];
  }

  GradSlot& leaf_slot(const std::shared_ptr<TensorImpl>& leaf) {
    auto [it, inserted] = leaf_index_.emplace(leaf.get(), leaves_.size());
    if (inserted) leaves_.emplace_back(leaf, GradSlot());
    return leaves_[it->second].second;
  }

  /// Note [B/W split in the engine]
  /// An input's gradient is wanted now when its edge leads to another node or to a leaf listed
  /// in `inputs` (the region's own inputs: the previous stage waits for them). It is wanted
  /// later when the edge leads to any other leaf (a parameter) and the caller asked to defer
  /// weight gradients: the node, its output gradients and that mask go to the queue, and the
  /// node keeps its saved tensors until the queue runs it. A parameter's gradient, now or
  /// later, may be added into .grad by the node itself (Note [Weight gradients accumulated in
  /// place] in node.h); it then comes back undefined and goes to no slot.
  ///
  /// Note [What W takes]
  /// Only nodes whose defers_weight_grads() is true leave their parameter gradients to W: the
  /// products (Linear, matmul), whose dW is a GEMM as large as B's dX, which is what W is for
  /// (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024; its implementation defers the
  /// linear layers' weight-gradient GEMMs alone). LayerNorm's and BatchNorm's γ and β
  /// gradients and Embedding's table gradient are reductions over the values B reads anyway
  /// (one kernel computes them with dx), so they are computed in B: the queue then keeps
  /// neither their saved input nor their output gradient until W, which for a transformer
  /// block is a third or more of what it kept.
  void run_node(const std::shared_ptr<Node>& node) {
    std::vector<Tensor> grads(node->num_outputs());
    bool any_grad = false;
    if (auto it = node_slots_.find(node.get()); it != node_slots_.end()) {
      for (size_t k = 0; k < grads.size(); ++k) {
        grads[k] = it->second[k].take();
        any_grad = any_grad || grads[k].defined();
      }
      node_slots_.erase(it);
    }
    bool deferred = false;
    if (any_grad) {
      const std::vector<Edge>& edges = node->next_edges();
      std::vector<bool> now(edges.size(), false), later(edges.size(), false);
      // Note [Weight gradients accumulated in place], node.h.
      std::vector<bool> into_grad(edges.size(), false);
      bool any_now = false, any_later = false;
      for (size_t i = 0; i < edges.size(); ++i) {
        if (!edges[i].valid()) continue;
        const bool is_parameter =
            edges[i].fn == nullptr && input_leaves_.count(edges[i].leaf.get()) == 0;
        if (is_parameter && options_.defer_weight_grads != nullptr &&
            node->defers_weight_grads()) {
          later[i] = any_later = true;
        } else {
          now[i] = any_now = true;
          into_grad[i] = is_parameter;
        }
      }
      // What W keeps first, so that B may take its copy (Node::grad_outputs_for_now).
      std::vector<Tensor> kept;
      if (any_later) kept = node->keep_for_weight_grads(grads, later);
      if (any_now) {
        const std::vector<Tensor> for_now =
            any_later ? node->grad_outputs_for_now(grads, kept, now) : std::move(grads);
        distribute(*node, node->apply_into_grad(for_now, now, into_grad), now);
      }
      if (any_later) {
        options_.defer_weight_grads->push(
            {node, std::move(kept), std::move(later), !options_.retain_graph});
        deferred = true;
      }
    }
    if (!options_.retain_graph && !deferred) node->release_saved();
  }

  void distribute(const Node& node, std::vector<Tensor> results, const std::vector<bool>& now) {
    const std::vector<Edge>& edges = node.next_edges();
    if (results.size() != edges.size()) {
      throw std::logic_error(std::string(node.name()) + " returned " +
                             std::to_string(results.size()) + " gradients for " +
                             std::to_string(edges.size()) + " inputs");
    }
    for (size_t i = 0; i < edges.size(); ++i) {
      if (!now[i] || !results[i].defined()) continue;
      if (edges[i].fn != nullptr) {
        slot_of(edges[i].fn, edges[i].output_nr).add(std::move(results[i]));
      } else {
        leaf_slot(edges[i].leaf).add(std::move(results[i]));
      }
    }
  }

  const BackwardOptions& options_;
  std::unordered_set<TensorImpl*> input_leaves_;
  std::vector<std::shared_ptr<Node>> roots_;
  std::vector<std::shared_ptr<Node>> order_;
  std::unordered_map<Node*, std::vector<GradSlot>> node_slots_;
  // Leaves in first-reached order (deterministic accumulation order), and their index.
  std::vector<std::pair<std::shared_ptr<TensorImpl>, GradSlot>> leaves_;
  std::unordered_map<TensorImpl*, size_t> leaf_index_;
};

}  // namespace

bool retains_graph() { return t_retain_graph; }

const char* const kTensorMethodsRecordNoHistory =
    "Tensor's own methods (reshape, flatten_from, slice, chunk, contiguous, clone, to, detach) "
    "record no autograd history: in a model or a loss use autograd::reshape, autograd::flatten, "
    "autograd::slice, autograd::contiguous, autograd::to and the other functions of autograd/";

std::vector<Tensor> backward(const std::vector<Tensor>& outputs,
                             const std::vector<Tensor>& grad_outputs,
                             const std::vector<Tensor>& inputs, const BackwardOptions& options) {
  if (!grad_outputs.empty() && grad_outputs.size() != outputs.size()) {
    throw std::invalid_argument("backward: got " + std::to_string(outputs.size()) +
                                " outputs but " + std::to_string(grad_outputs.size()) +
                                " grad_outputs");
  }
  NoGradGuard no_grad;  // backward itself records nothing (no higher-order gradients)
  RetainGraphScope retain(options.retain_graph);
  GraphTask task(inputs, options);
  task.seed(outputs, grad_outputs);
  task.discover();
  task.run();
  return task.finish(inputs);
}

void WeightGradQueue::run() {
  NoGradGuard no_grad;
  std::vector<Item> items = std::move(items_);
  items_.clear();
  for (Item& item : items) {
    RetainGraphScope retain(!item.release);
    // Every deferred input is a parameter: each may be accumulated in place.
    std::vector<Tensor> grads = item.node->apply_weight_grads(item.kept, item.wanted);
    const std::vector<Edge>& edges = item.node->next_edges();
    for (size_t i = 0; i < edges.size() && i < grads.size(); ++i) {
      if (item.wanted[i] && grads[i].defined()) {
        accumulate_into_grad(*edges[i].leaf, std::move(grads[i]));
      }
    }
    if (item.release) item.node->release_saved();
  }
}

}  // namespace pipewright::autograd
