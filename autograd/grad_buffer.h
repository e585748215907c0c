// GradSlot and accumulate_into_grad(): summing gradients without aliasing (engine internals).
//
// Note [Never alias a gradient]
// The same gradient tensor can reach several places: AddBackward returns one tensor for both
// of its inputs, a user's grad_output may flow straight to a leaf, a reshape's gradient is a
// view of its output's gradient. Summing in place (+=) into a tensor that someone else also
// holds would silently change their value. So a sum is done in place only into a tensor that
// is provably ours alone (is_exclusive: the only handle to the only view of its storage);
// otherwise the sum makes a fresh tensor. A leaf's .grad is created the same way: the arriving
// tensor itself when exclusive (no copy), else a clone.
#pragma once

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// True when `t` is contiguous and is the only handle to the only view of its storage, so
/// writing into it in place cannot be observed by anyone else.
bool is_exclusive(const Tensor& t);

/// Sums the gradients arriving for one destination (one output of a node, or one leaf).
class GradSlot {
 public:
  /// value += g (the first gradient is kept as is; see Note [Never alias a gradient]).
  void add(Tensor g);
  bool defined() const { return value_.defined(); }
  /// The sum so far, leaving the slot empty.
  Tensor take() { return std::move(value_); }

 private:
  Tensor value_;
};

/// The leaf's .grad as a tensor to add a gradient of `shape`, `dtype` and `device` into in
/// place (Note [Weight gradients accumulated in place] in node.h), or an undefined tensor when
/// that is not safe or not possible: no .grad yet, a .grad that someone else also holds (a
/// handle the user kept, a view sharing its storage), a non-contiguous .grad, or one whose
/// shape, dtype or device differ (the ordinary path then reports the mismatch).
Tensor grad_to_accumulate_into(const TensorImpl& leaf, const Shape& shape, DType dtype,
                               Device device);

/// leaf.grad += g, creating leaf.grad the first time (from g itself when exclusive, else a
/// copy). Throws std::invalid_argument when an existing .grad has a different shape.
void accumulate_into_grad(TensorImpl& leaf, Tensor g);

}  // namespace pipewright::autograd
