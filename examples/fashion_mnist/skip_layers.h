// The two skip-connection layers the residual and U-Net examples are built from, and the
// header line that shows where a pipeline routes their skips.
//
//   nn::Sequential block{Stash("in"), nn::Linear(W, W), nn::BatchNorm1d(W), AddStashed("in")};
//   nn::isolate(block, nn::Namespace());     // one namespace per block instance
//
// Stash passes its input on unchanged and stashes it; AddStashed pops it and adds it to its
// own input (shapes must match), so block(x) = f(x) + x. The layers can be cut apart by a
// pipeline's balance: the stashed tensor then crosses the stages as a portal (nn/skip.h).
#pragma once

#include <ostream>
#include <string>

#include "nn/skip.h"
#include "pipeline/pipe.h"

namespace pipewright::examples {

/// x -> x, stashing x under `name`.
class Stash : public nn::Skippable {
 public:
  explicit Stash(std::string name);
  using nn::Module::forward;
  Tensor forward(const Tensor& x) override;
  /// "Stash(in)".
  std::string str() const override;

 private:
  std::string name_;
};

/// y -> y + popped(name). The popped tensor must have y's shape (autograd::add's error names
/// both).
class AddStashed : public nn::Skippable {
 public:
  explicit AddStashed(std::string name);
  using nn::Module::forward;
  Tensor forward(const Tensor& y) override;
  /// "AddStashed(in)".
  std::string str() const override;

 private:
  std::string name_;
};

/// Writes one line per skip of the pipe's model, where it starts and ends once cut into
/// stages, and whether it crosses stages ("portal") or stays inside one ("local"):
///   skip 'in' (namespace 3) from stage 0 (child 3, Stash(in)) to stage 1 (child 9, ...): portal
void describe_skips(const pipeline::Pipe& pipe, std::ostream& out);

}  // namespace pipewright::examples
