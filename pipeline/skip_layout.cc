// SkipLayout and verify_skippables (skip_layout.h).
#include "pipeline/skip_layout.h"

#include <map>
#include <stdexcept>

namespace pipewright::pipeline {
namespace {

/// One declaration of a skip by a layer, in the order the Sequential runs its layers.
struct Use {
  size_t child = 0;
  size_t order = 0;  // position in find_skippables (depth-first, registration order)
  std::string layer;
};

struct Uses {
  std::vector<Use> stashes;
  std::vector<Use> pops;
};

std::string where(const Use& u) {
  return "child " + std::to_string(u.child) + " (" + u.layer + ")";
}

std::map<nn::SkipKey, Uses> collect(const nn::Sequential& module) {
  std::map<nn::SkipKey, Uses> uses;
  const std::vector<nn::SkippableAt> layers = nn::find_skippables(module);
  for (size_t i = 0; i < layers.size(); ++i) {
    const nn::SkippableAt& at = layers[i];
    const Use use{at.child, i, at.layer->str()};
    for (const nn::SkipKey& key : at.layer->stash_keys()) uses[key].stashes.push_back(use);
    for (const nn::SkipKey& key : at.layer->pop_keys()) uses[key].pops.push_back(use);
  }
  return uses;
}

/// " ('x' is stashed in namespace 3: isolate both layers in the same namespace)" when `key`'s
/// name is used with the other half in another namespace.
std::string other_namespace_hint(const std::map<nn::SkipKey, Uses>& uses, const nn::SkipKey& key,
                                 bool want_stash) {
  for (const auto& [other, u] : uses) {
    if (other.name != key.name || other.ns == key.ns) continue;
    if (want_stash ? u.stashes.empty() : u.pops.empty()) continue;
    return " (" + other.str() + " is " + (want_stash ? "stashed" : "popped") +
           " there: put both layers in the same namespace)";
  }
  return "";
}

}  // namespace

std::string SkipRoute::str() const {
  return key.str() + " from stage " + std::to_string(stash_stage) + " (child " +
         std::to_string(stash_child) + ", " + stash_layer + ") to stage " +
         std::to_string(pop_stage) + " (child " + std::to_string(pop_child) + ", " + pop_layer +
         ")";
}

void verify_skippables(const nn::Sequential& module) {
  const std::map<nn::SkipKey, Uses> uses = collect(module);
  std::vector<std::string> problems;
  for (const auto& [key, u] : uses) {
    if (u.stashes.size() > 1 || u.pops.size() > 1) {
      const bool stash = u.stashes.size() > 1;
      const std::vector<Use>& list = stash ? u.stashes : u.pops;
      std::string msg = key.str() + " is " + (stash ? "stashed" : "popped") + " by " +
                        std::to_string(list.size()) + " layers:";
      for (size_t i = 0; i < list.size(); ++i) msg += (i ? ", " : " ") + where(list[i]);
      problems.push_back(msg + "; give each instance of a block its own namespace "
                               "(nn::isolate(block, nn::Namespace()))");
      continue;
    }
    if (u.pops.empty()) {
      problems.push_back(key.str() + " is stashed by " + where(u.stashes[0]) +
                         " but never popped" + other_namespace_hint(uses, key, false));
    } else if (u.stashes.empty()) {
      problems.push_back(key.str() + " is popped by " + where(u.pops[0]) +
                         " but never stashed" + other_namespace_hint(uses, key, true));
    } else if (u.pops[0].order < u.stashes[0].order) {
      problems.push_back(key.str() + " is popped by " + where(u.pops[0]) + " before " +
                         where(u.stashes[0]) + " stashes it");
    }
  }
  if (problems.empty()) return;
  std::string msg = "skip connections do not match:";
  for (const std::string& p : problems) msg += "\n  " + p;
  throw std::invalid_argument(msg);
}

SkipLayout::SkipLayout(const nn::Sequential& module, const std::vector<int>& balance)
    : in_(balance.size()), out_(balance.size()) {
  verify_skippables(module);
  std::vector<int> stage_of_child;
  for (size_t s = 0; s < balance.size(); ++s) {
    for (int k = 0; k < balance[s]; ++k) stage_of_child.push_back(static_cast<int>(s));
  }
  for (const auto& [key, u] : collect(module)) {
    const Use& stash = u.stashes.at(0);
    const Use& pop = u.pops.at(0);
    SkipRoute route{key,
                    stash.child,
                    pop.child,
                    stage_of_child.at(stash.child),
                    stage_of_child.at(pop.child),
                    stash.layer,
                    pop.layer};
    const int r = static_cast<int>(routes_.size());
    if (!route.local()) {
      out_[static_cast<size_t>(route.stash_stage)].push_back(r);
      in_[static_cast<size_t>(route.pop_stage)].push_back(r);
    }
    routes_.push_back(std::move(route));
  }
}

int SkipLayout::find(const nn::SkipKey& key) const {
  for (size_t r = 0; r < routes_.size(); ++r) {
    if (routes_[r].key == key) return static_cast<int>(r);
  }
  return -1;
}

std::vector<SkipEdge> SkipLayout::edges() const {
  std::vector<SkipEdge> edges;
  for (const SkipRoute& route : routes_) {
    if (!route.local()) edges.push_back({route.stash_stage, route.pop_stage});
  }
  return edges;
}

const std::vector<int>& SkipLayout::portals_in(int stage) const {
  static const std::vector<int> kNone;
  return stage >= 0 && static_cast<size_t>(stage) < in_.size() ? in_[static_cast<size_t>(stage)]
                                                                : kNone;
}

const std::vector<int>& SkipLayout::portals_out(int stage) const {
  static const std::vector<int> kNone;
  return stage >= 0 && static_cast<size_t>(stage) < out_.size() ? out_[static_cast<size_t>(stage)]
                                                                 : kNone;
}

}  // namespace pipewright::pipeline
