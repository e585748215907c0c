// Sequential: an ordered list of modules applied one after another (torch.nn.Sequential).
//
//   nn::Sequential model{nn::Linear(784, 1024), nn::ReLU(), nn::Linear(1024, 10)};
//
// Children are named "0", "1", ... Modules passed by value are moved into shared ownership;
// slice() shares the same module instances (a pipeline partition is a slice).
// A single Sequential argument moves that Sequential (it does not nest it); nest with
// push_back(Sequential{...}) or pass a std::shared_ptr<Sequential>.
#pragma once

#include <memory>
#include <type_traits>
#include <vector>

#include "nn/module.h"

namespace pipewright::nn {

/// What Sequential's constructor and push_back accept: a Module subclass by value, or a
/// std::shared_ptr to one.
template <class M>
concept SequentialElement = std::is_base_of_v<Module, std::decay_t<M>> ||
                            std::is_convertible_v<std::decay_t<M>, std::shared_ptr<Module>>;

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(Sequential&&) = default;
  Sequential& operator=(Sequential&&) = default;
  /// Takes modules by value (moved) or as std::shared_ptr<M>. Constrained so that it never
  /// competes with the move constructor (one Sequential argument).
  template <class... Ms>
    requires(sizeof...(Ms) > 0 && (SequentialElement<Ms> && ...) &&
             !(sizeof...(Ms) == 1 && (std::is_same_v<std::decay_t<Ms>, Sequential> && ...)))
  explicit Sequential(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  template <SequentialElement M>
  void push_back(M&& module) {
    using D = std::decay_t<M>;
    if constexpr (std::is_convertible_v<D, std::shared_ptr<Module>>) {
      push_back_shared(std::shared_ptr<Module>(module));
    } else {
      static_assert(std::is_base_of_v<Module, D>, "Sequential holds nn::Module subclasses");
      push_back_shared(std::make_shared<D>(std::forward<M>(module)));
    }
  }
  /// Appends `module` (shared, not copied) as child "<size()>". Throws std::invalid_argument
  /// for a null pointer.
  void push_back_shared(std::shared_ptr<Module> module);

  size_t size() const { return modules_.size(); }
  /// Throws std::out_of_range naming index and size.
  Module& operator[](size_t i) const;
  const std::shared_ptr<Module>& ptr(size_t i) const;
  /// Modules [begin, end) as a new Sequential sharing the same instances; children are renamed
  /// from "0", and the slice remembers where it was cut (first_layer() = this one's + begin).
  /// Throws std::out_of_range unless begin <= end <= size().
  Sequential slice(size_t begin, size_t end) const;
  /// The index of child 0 in the model this was sliced from (0 unless made by slice()): the
  /// layer index random draws are keyed by (Note [Keyed randomness], nn/random_key.h).
  size_t first_layer() const { return first_layer_; }

  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

  /// Each module's list forward in turn (a module may take and return several tensors),
  /// child i under LayerScope(first_layer() + i).
  Tensor forward(const Tensor& input) override;
  Tensors forward(const Tensors& inputs) override;
  /// PyTorch's layout: "Sequential(\n  (0): Linear(...)\n  (1): ReLU()\n)".
  std::string str() const override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
  size_t first_layer_ = 0;
};

}  // namespace pipewright::nn
