// Skip connections for Sequential models: a layer stashes a tensor under a name, a later
// layer pops it (torchgpipe.skip: @skippable, stash, pop, Namespace, isolate).
//
//   class Save : public nn::Skippable {            // stashes "x", passes its input on
//    public:
//     Save() : Skippable({.stash = {"x"}}) {}
//     Tensor forward(const Tensor& x) override { stash("x", x); return x; }
//     std::string str() const override { return "Save()"; }
//   };
//   class AddSaved : public nn::Skippable {        // pops "x" and adds it
//    public:
//     AddSaved() : Skippable({.pop = {"x"}}) {}
//     Tensor forward(const Tensor& y) override { return y + pop("x"); }
//     std::string str() const override { return "AddSaved()"; }
//   };
//   nn::Sequential block{Save(), nn::Linear(8, 8), nn::ReLU(), AddSaved()};   // y = relu(Wx+b) + x
//
// Inside a pipeline::Pipe the stashed tensor travels straight from the stage that stashes it
// to the stage that pops it (a portal: one copy to the popping stage's device, not through
// the stages between), and the gradient of the popped tensor travels back the same way
// (docs/pipeline.md, "Skip connections"). Outside a Pipe, stash and pop meet in the calling
// thread's default SkipTracker, so the same model runs un-pipelined unchanged.
//
// Names and namespaces. A skip is identified by (namespace, name). Every layer starts in the
// default namespace; a block class used several times in one model must put each instance in
// a namespace of its own (nn::isolate(block, Namespace())), else two layers stash the same
// skip and the Pipe refuses the model ("stashed twice"), as torchgpipe's verify_skippables.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nn/module.h"

namespace pipewright::nn {

/// A namespace for skip names. Each default-constructed Namespace is distinct from every
/// other (a process-wide counter); copies compare equal. The default namespace is id 0.
class Namespace {
 public:
  Namespace();
  uint64_t id() const { return id_; }
  friend auto operator<=>(const Namespace&, const Namespace&) = default;
  /// The namespace every layer starts in.
  static Namespace default_namespace() { return Namespace(0); }

 private:
  explicit Namespace(uint64_t id) : id_(id) {}
  uint64_t id_;
};

/// Identifies one skip connection: a name in a namespace.
struct SkipKey {
  Namespace ns = Namespace::default_namespace();
  std::string name;

  friend auto operator<=>(const SkipKey&, const SkipKey&) = default;
  /// "'x'" in the default namespace, "'x' (namespace 3)" otherwise.
  std::string str() const;
};

/// Where stash() puts tensors and pop() takes them from. Each thread has a current tracker:
/// the Pipe installs one per cell while a stage runs; otherwise the thread's default tracker
/// (a map: stash stores, pop takes the tensor out) is used.
class SkipTracker {
 public:
  virtual ~SkipTracker() = default;
  /// Called by Skippable::stash. `layer` is the stashing layer (for messages).
  virtual void stash(const Module& layer, const SkipKey& key, const Tensor& tensor) = 0;
  /// Called by Skippable::pop; returns the stashed tensor.
  virtual Tensor pop(const Module& layer, const SkipKey& key) = 0;
};

/// The calling thread's tracker: the innermost SkipTrackerGuard's, or the thread's default.
SkipTracker& current_skip_tracker();

/// Installs `tracker` as the calling thread's current tracker for the guard's lifetime.
class SkipTrackerGuard {
 public:
  explicit SkipTrackerGuard(SkipTracker& tracker);
  ~SkipTrackerGuard();
  SkipTrackerGuard(const SkipTrackerGuard&) = delete;
  SkipTrackerGuard& operator=(const SkipTrackerGuard&) = delete;

 private:
  SkipTracker* previous_;
};

/// The default tracker outside a pipeline: stash stores the tensor (replacing an earlier one
/// under the same key, as torchgpipe's), pop takes it out and throws std::logic_error
/// ("AddSaved(): pop of 'x' but nothing is stashed under it") when nothing is there.
class MapSkipTracker final : public SkipTracker {
 public:
  void stash(const Module& layer, const SkipKey& key, const Tensor& tensor) override;
  Tensor pop(const Module& layer, const SkipKey& key) override;
  /// Keys stashed and not popped yet.
  std::vector<SkipKey> pending() const;
  void clear() { tensors_.clear(); }

 private:
  std::map<SkipKey, Tensor> tensors_;
};

/// What a Skippable layer declares: the names it stashes and the names it pops.
struct SkipNames {
  std::vector<std::string> stash = {};
  std::vector<std::string> pop = {};
};

/// Base class of a layer with skip connections (torchgpipe's @skippable). The declared names
/// are fixed at construction; the pipeline reads them to route each skip before any forward.
class Skippable : public Module {
 public:
  /// Throws std::invalid_argument for an empty name, a name declared twice, or a name both
  /// stashed and popped by this layer (naming it).
  explicit Skippable(SkipNames names);

  const std::vector<std::string>& stash_names() const { return names_.stash; }
  const std::vector<std::string>& pop_names() const { return names_.pop; }
  /// The skip `name` of this layer, in the namespace it is isolated in. Throws
  /// std::invalid_argument when the layer declares no such name.
  SkipKey key(const std::string& name) const;
  /// Every declared skip of this layer: stashes, then pops.
  std::vector<SkipKey> stash_keys() const;
  std::vector<SkipKey> pop_keys() const;

  /// Puts this layer's names (all, or only those in `only`) into `ns` (torchgpipe's
  /// Skippable.isolate). Throws std::invalid_argument for a name in `only` this layer does not
  /// declare.
  void isolate(const Namespace& ns, const std::vector<std::string>& only = {});

 protected:
  /// Hands `tensor` to the current tracker under this layer's skip `name`. Throws
  /// std::logic_error when `name` is not among the declared stash names.
  void stash(const std::string& name, const Tensor& tensor);
  /// The tensor stashed under `name`. Throws std::logic_error when `name` is not among the
  /// declared pop names, and the tracker's error when nothing was stashed.
  Tensor pop(const std::string& name);

 private:
  SkipNames names_;
  std::map<std::string, Namespace> namespaces_;  // only names moved out of the default
};

/// Isolates every Skippable in `module`'s tree (itself included) in `ns`: what a user does to
/// each instance of a block class used more than once. `only`, when given, limits it to
/// those names (names a layer does not declare are skipped here, not an error).
void isolate(Module& module, const Namespace& ns, const std::vector<std::string>& only = {});

/// Every Skippable in `module`'s tree, depth first in registration order (for a Sequential,
/// the order its forward runs them), with the index of the top-level child holding it.
struct SkippableAt {
  size_t child = 0;
  const Skippable* layer = nullptr;
};
std::vector<SkippableAt> find_skippables(const Module& module);

}  // namespace pipewright::nn
