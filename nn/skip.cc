// Skippable layers, namespaces and the per-thread tracker (skip.h).
#include "nn/skip.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <stdexcept>

namespace pipewright::nn {
namespace {

std::atomic<uint64_t> next_namespace{1};

MapSkipTracker& default_tracker() {
  thread_local MapSkipTracker tracker;
  return tracker;
}

thread_local SkipTracker* installed = nullptr;

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

Namespace::Namespace() : id_(next_namespace.fetch_add(1, std::memory_order_relaxed)) {}

std::string SkipKey::str() const {
  std::string s = "'" + name + "'";
  if (ns.id() != 0) s += " (namespace " + std::to_string(ns.id()) + ")";
  return s;
}

SkipTracker& current_skip_tracker() {
  return installed != nullptr ? *installed : default_tracker();
}

SkipTrackerGuard::SkipTrackerGuard(SkipTracker& tracker) : previous_(installed) {
  installed = &tracker;
}

SkipTrackerGuard::~SkipTrackerGuard() { installed = previous_; }

void MapSkipTracker::stash(const Module& layer, const SkipKey& key, const Tensor& tensor) {
  tensors_[key] = tensor;
}

Tensor MapSkipTracker::pop(const Module& layer, const SkipKey& key) {
  auto it = tensors_.find(key);
  if (it == tensors_.end()) {
    throw std::logic_error(layer.str() + ": pop of " + key.str() +
                           " but nothing is stashed under it");
  }
  Tensor t = std::move(it->second);
  tensors_.erase(it);
  return t;
}

std::vector<SkipKey> MapSkipTracker::pending() const {
  std::vector<SkipKey> keys;
  for (const auto& [key, tensor] : tensors_) keys.push_back(key);
  return keys;
}

Skippable::Skippable(SkipNames names) : names_(std::move(names)) {
  std::vector<std::string> seen;
  for (const auto* list : {&names_.stash, &names_.pop}) {
    for (const std::string& name : *list) {
      if (name.empty()) throw std::invalid_argument("Skippable: a skip name is empty");
      if (contains(seen, name)) {
        throw std::invalid_argument(
            "Skippable: '" + name + "' is declared twice" +
            (contains(names_.stash, name) && contains(names_.pop, name)
                 ? " (a layer cannot stash and pop the same name)"
                 : ""));
      }
      seen.push_back(name);
    }
  }
}

SkipKey Skippable::key(const std::string& name) const {
  if (!contains(names_.stash, name) && !contains(names_.pop, name)) {
    throw std::invalid_argument(str() + " declares no skip named '" + name + "'");
  }
  auto it = namespaces_.find(name);
  return {it == namespaces_.end() ? Namespace::default_namespace() : it->second, name};
}

std::vector<SkipKey> Skippable::stash_keys() const {
  std::vector<SkipKey> keys;
  for (const std::string& name : names_.stash) keys.push_back(key(name));
  return keys;
}

std::vector<SkipKey> Skippable::pop_keys() const {
  std::vector<SkipKey> keys;
  for (const std::string& name : names_.pop) keys.push_back(key(name));
  return keys;
}

void Skippable::isolate(const Namespace& ns, const std::vector<std::string>& only) {
  for (const std::string& name : only) key(name);  // throws for an undeclared name
  for (const auto* list : {&names_.stash, &names_.pop}) {
    for (const std::string& name : *list) {
      if (only.empty() || contains(only, name)) namespaces_.insert_or_assign(name, ns);
    }
  }
}

void Skippable::stash(const std::string& name, const Tensor& tensor) {
  if (!contains(names_.stash, name)) {
    throw std::logic_error(str() + ": stash of '" + name +
                           "', which the layer does not declare in SkipNames::stash");
  }
  current_skip_tracker().stash(*this, key(name), tensor);
}

Tensor Skippable::pop(const std::string& name) {
  if (!contains(names_.pop, name)) {
    throw std::logic_error(str() + ": pop of '" + name +
                           "', which the layer does not declare in SkipNames::pop");
  }
  return current_skip_tracker().pop(*this, key(name));
}

void isolate(Module& module, const Namespace& ns, const std::vector<std::string>& only) {
  if (auto* layer = dynamic_cast<Skippable*>(&module)) {
    std::vector<std::string> mine;
    for (const std::string& name : only) {
      if (contains(layer->stash_names(), name) || contains(layer->pop_names(), name)) {
        mine.push_back(name);
      }
    }
    if (only.empty() || !mine.empty()) layer->isolate(ns, mine);
  }
  for (const auto& [name, child] : module.children()) isolate(*child, ns, only);
}

std::vector<SkippableAt> find_skippables(const Module& module) {
  std::vector<SkippableAt> found;
  std::function<void(const Module&, size_t)> visit = [&](const Module& m, size_t child) {
    if (const auto* layer = dynamic_cast<const Skippable*>(&m)) found.push_back({child, layer});
    for (const auto& [name, grandchild] : m.children()) visit(*grandchild, child);
  };
  const auto& children = module.children();
  for (size_t i = 0; i < children.size(); ++i) visit(*children[i].second, i);
  return found;
}

}  // namespace pipewright::nn
