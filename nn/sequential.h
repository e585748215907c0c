// Sequential: an ordered list of modules applied one after another (torch.nn.Sequential).
//
//   nn::Sequential model{nn::Linear(784, 1024), nn::ReLU(), nn::Linear(1024, 10)};
//
// Children are named "0", "1", ... Modules passed by value are moved into shared ownership;
// slice() shares the same module instances (a pipeline partition is a slice).
#pragma once

#include <memory>
#include <type_traits>
#include <vector>

#include "nn/module.h"

namespace pipewright::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  /// Takes modules by value (moved) or as std::shared_ptr<M>.
  template <class... Ms>
  explicit Sequential(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  template <class M>
  void push_back(M&& module) {
    using D = std::decay_t<M>;
    if constexpr (std::is_convertible_v<D, std::shared_ptr<Module>>) {
      push_back_shared(std::shared_ptr<Module>(module));
    } else {
      static_assert(std::is_base_of_v<Module, D>, "Sequential holds nn::Module subclasses");
      push_back_shared(std::make_shared<D>(std::forward<M>(module)));
    }
  }
  void push_back_shared(std::shared_ptr<Module> module);

  size_t size() const { return modules_.size(); }
  /// Throws std::out_of_range naming index and size.
  Module& operator[](size_t i) const;
  const std::shared_ptr<Module>& ptr(size_t i) const;
  /// Modules [begin, end) as a new Sequential sharing the same instances; children are renamed
  /// from "0". Throws std::out_of_range unless begin <= end <= size().
  Sequential slice(size_t begin, size_t end) const;

  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

  Tensor forward(const Tensor& input) override;
  Tensors forward(const Tensors& inputs) override;
  std::string str() const override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace pipewright::nn
