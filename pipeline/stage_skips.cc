// StageSkips (stage_skips.h, Note [Portals]).
#include "pipeline/stage_skips.h"

#include <stdexcept>
#include <string>

namespace pipewright::pipeline {

StageSkips::StageSkips(const SkipLayout& layout, int stage, int microbatch, nn::Tensors popped)
    : layout_(layout),
      stage_(stage),
      microbatch_(microbatch),
      popped_(layout.routes().size(), 0) {
  const std::vector<int>& routes = layout.portals_in(stage);
  if (popped.size() != routes.size()) {
    throw std::logic_error(where() + ": " + std::to_string(popped.size()) +
                           " popped tensors for " + std::to_string(routes.size()) + " portals");
  }
  for (size_t k = 0; k < routes.size(); ++k) in_[routes[k]] = std::move(popped[k]);
}

std::string StageSkips::where() const {
  return "stage " + std::to_string(stage_) + ", micro-batch " + std::to_string(microbatch_);
}

void StageSkips::stash(const nn::Module& layer, const nn::SkipKey& key, const Tensor& tensor) {
  const int r = layout_.find(key);
  if (r < 0 || layout_.route(r).stash_stage != stage_) {
    throw std::logic_error(layer.str() + " stashed " + key.str() + " on " + where() +
                           ", which the Pipe's skip layout does not route from this stage");
  }
  std::map<int, Tensor>& into = layout_.route(r).local() ? local_ : out_;
  if (into.count(r) != 0 || popped_[static_cast<size_t>(r)]) {
    throw std::logic_error(layer.str() + " stashed " + key.str() + " twice in one forward (" +
                           where() + ")");
  }
  into[r] = tensor;
}

Tensor StageSkips::pop(const nn::Module& layer, const nn::SkipKey& key) {
  const int r = layout_.find(key);
  if (r < 0 || layout_.route(r).pop_stage != stage_) {
    throw std::logic_error(layer.str() + " popped " + key.str() + " on " + where() +
                           ", which the Pipe's skip layout does not route to this stage");
  }
  if (popped_[static_cast<size_t>(r)]) {
    throw std::logic_error(layer.str() + " popped " + key.str() + " twice in one forward (" +
                           where() + ")");
  }
  std::map<int, Tensor>& from = layout_.route(r).local() ? local_ : in_;
  auto it = from.find(r);
  if (it == from.end()) {
    throw std::logic_error(layer.str() + " popped " + key.str() + " on " + where() +
                           " before it was stashed");
  }
  Tensor t = std::move(it->second);
  from.erase(it);  // the tracker lets go at once: the layer now holds the only reference
  popped_[static_cast<size_t>(r)] = 1;
  return t;
}

nn::Tensors StageSkips::finish() {
  for (size_t r = 0; r < layout_.routes().size(); ++r) {
    const SkipRoute& route = layout_.routes()[r];
    const bool stashed = popped_[r] || local_.count(static_cast<int>(r)) != 0;
    if (route.local() && route.stash_stage == stage_ && !stashed) {
      throw std::logic_error(route.stash_layer + " did not stash " + route.key.str() +
                             " during the forward of " + where());
    }
    if (route.pop_stage == stage_ && !popped_[r]) {
      throw std::logic_error(route.pop_layer + " did not pop " + route.key.str() +
                             " during the forward of " + where());
    }
  }
  nn::Tensors out;
  for (int r : layout_.portals_out(stage_)) {
    auto it = out_.find(r);
    if (it == out_.end()) {
      throw std::logic_error(layout_.route(r).stash_layer + " did not stash " +
                             layout_.route(r).key.str() + " during the forward of " + where());
    }
    out.push_back(std::move(it->second));
  }
  out_.clear();
  return out;
}

}  // namespace pipewright::pipeline
