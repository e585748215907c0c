// Node numbering, should_record() and NodeRecorder (see node.h).
#include "autograd/node.h"

#include <atomic>
#include <stdexcept>
#include <string>

#include "autograd/grad_mode.h"

namespace pipewright::autograd {
namespace {
// Note [Sequence numbers across threads]
// One process-wide counter, incremented with a relaxed fetch_add: no lock, and each thread's
// nodes are numbered in its program order. When a node on thread B consumes a tensor made on
// thread A, B must have received that tensor through some synchronisation (a queue, a join),
// so A's increment happens-before B's and B's number is larger: "decreasing sequence_nr" is
// still a valid reverse topological order of every graph.
std::atomic<uint64_t> g_next_sequence_nr{0};
}  // namespace

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

void Node::check_not_released() const {
  if (released_) {
    throw std::logic_error(
        std::string("Trying to backward through the graph a second time (") + name() +
        "): its saved tensors were freed by the first backward. Pass "
        "BackwardOptions{.retain_graph = true} to the first backward if you need to run "
        "backward through the same graph twice.");
  }
}

bool should_record(const std::vector<Tensor>& inputs) {
  if (!grad_mode_enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

void NodeRecorder::record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
                          const std::vector<Tensor*>& outputs) {
  node->next_edges_.clear();
  node->next_edges_.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    Edge edge;
    if (t.defined() && t.requires_grad()) {
      if (t.grad_fn() != nullptr) {
        edge.fn = t.grad_fn();
        edge.output_nr = t.impl()->output_nr;
      } else {
        edge.leaf = t.impl_ptr();
      }
    }
    node->next_edges_.push_back(std::move(edge));
  }
  node->num_outputs_ = static_cast<uint32_t>(outputs.size());
  for (uint32_t i = 0; i < outputs.size(); ++i) {
    TensorImpl* impl = outputs[i]->impl();
    impl->requires_grad = true;
    impl->grad_fn = node;
    impl->output_nr = i;
  }
}

}  // namespace pipewright::autograd
