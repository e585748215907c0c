#include "examples/common/run_checkpoint.h"

#include <filesystem>
#include <set>
#include <stdexcept>

#include "nn/safetensors.h"
#include "nn/serialize.h"

namespace pipewright::examples {
namespace {

std::string shard_path(const std::string& path, int rank) {
  return path + ".rank" + std::to_string(rank);
}

/// The model child a "model.<child>...." or "optimizer.state.<child>...." key belongs to, or
/// -1 for a key of no child (the optimizer's hyperparameters).
int child_of(const std::string& key) {
  std::string rest;
  if (key.rfind("model.", 0) == 0) {
    rest = key.substr(6);
  } else if (key.rfind("optimizer.state.", 0) == 0) {
    rest = key.substr(16);
  } else {
    return -1;
  }
  return std::stoi(rest.substr(0, rest.find('.')));
}

nn::SafetensorsFile read_verified(const std::string& path) {
  nn::SafetensorsFile file = nn::load_safetensors(path);
  if (!file.verified) {
    throw nn::SafetensorsError(path, "no checksum: not a checkpoint written by --save");
  }
  return file;
}

int meta_int(const std::map<std::string, std::string>& meta, const std::string& key,
             const std::string& path) {
  auto it = meta.find(key);
  if (it == meta.end()) throw std::runtime_error(path + ": no \"" + key + "\" entry");
  return std::stoi(it->second);
}

}  // namespace

void save_run_checkpoint(const std::string& path, const pipeline::Pipe& pipe,
                         const nn::Optimizer& optimizer,
                         std::map<std::string, std::string> metadata,
                         const distributed::MpiProcesses* processes) {
  nn::NamedTensors all = nn::checkpoint_tensors(pipe.module(), optimizer);
  if (processes == nullptr) {
    nn::save_safetensors(path, all, metadata);
    return;
  }
  // The children of the stages this rank trains.
  std::set<int> mine;
  int child = 0;
  for (size_t s = 0; s < pipe.balance().size(); ++s) {
    for (int i = 0; i < pipe.balance()[s]; ++i, ++child) {
      if (pipe.runs_stage(static_cast<int>(s))) mine.insert(child);
    }
  }
  nn::NamedTensors shard;
  for (auto& [key, t] : all) {
    const int c = child_of(key);
    if (c < 0 || mine.count(c)) shard.emplace_back(key, t);
  }
  metadata["layout.ranks"] = std::to_string(processes->workers() * processes->replicas());
  metadata["layout.replicas"] = std::to_string(processes->replicas());
  nn::save_safetensors(shard_path(path, processes->rank()), shard, metadata);
}

std::map<std::string, std::string> load_run_checkpoint(const std::string& path,
                                                       pipeline::Pipe& pipe,
                                                       nn::Optimizer& optimizer,
                                                       const distributed::MpiProcesses* processes) {
  if (std::filesystem::exists(path)) {
    nn::SafetensorsFile file = read_verified(path);
    nn::load_checkpoint_tensors(file.tensors, pipe.module(), optimizer, path);
    return file.metadata;
  }
  const std::string first = shard_path(path, 0);
  if (!std::filesystem::exists(first)) {
    throw std::runtime_error("no checkpoint at " + path + " (nor its shards " + first + ", ...)");
  }
  nn::SafetensorsFile shard0 = read_verified(first);
  const int ranks = meta_int(shard0.metadata, "layout.ranks", first);
  const int replicas = meta_int(shard0.metadata, "layout.replicas", first);
  const int workers = ranks / std::max(1, replicas);
  const int mine = processes != nullptr ? processes->replica() : 0;
  const int replica = mine < replicas ? mine : 0;
  nn::NamedTensors merged;
  std::set<std::string> seen;
  for (int w = 0; w < workers; ++w) {
    const std::string name = shard_path(path, replica * workers + w);
    if (!std::filesystem::exists(name)) {
      throw std::runtime_error(path + ": shard " + name + " of " + std::to_string(ranks) +
                               " is missing");
    }
    nn::SafetensorsFile file = name == first ? shard0 : read_verified(name);
    for (auto& [key, t] : file.tensors) {
      if (seen.insert(key).second) merged.emplace_back(key, t);
    }
  }
  nn::load_checkpoint_tensors(merged, pipe.module(), optimizer, path);
  return shard0.metadata;
}

}  // namespace pipewright::examples
