#include "examples/fashion_mnist/skip_layers.h"

#include <utility>

#include "autograd/functions.h"
#include "pipeline/skip_layout.h"

namespace pipewright::examples {

Stash::Stash(std::string name) : Skippable({.stash = {name}}), name_(std::move(name)) {}

Tensor Stash::forward(const Tensor& x) {
  stash(name_, x);
  return x;
}

std::string Stash::str() const { return "Stash(" + name_ + ")"; }

AddStashed::AddStashed(std::string name) : Skippable({.pop = {name}}), name_(std::move(name)) {}

Tensor AddStashed::forward(const Tensor& y) { return autograd::add(y, pop(name_)); }

std::string AddStashed::str() const { return "AddStashed(" + name_ + ")"; }

void describe_skips(const pipeline::Pipe& pipe, std::ostream& out) {
  const pipeline::SkipLayout layout(pipe.module(), pipe.balance());
  for (const pipeline::SkipRoute& route : layout.routes()) {
    out << "skip " << route.str() << ": " << (route.local() ? "local" : "portal") << "\n";
  }
}

}  // namespace pipewright::examples
