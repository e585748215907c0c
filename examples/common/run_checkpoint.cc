#include "examples/common/run_checkpoint.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <vector>

#include "nn/safetensors.h"
#include "nn/serialize.h"

namespace pipewright::examples {

// Note [Checkpoints that commit]
// A checkpoint of a run over many processes is complete only when every rank's shard is on
// disk, and ranks die independently: a rank killed between two others' writes would leave
// shards of two epochs under one name, and a resume that merged them would mix epochs
// silently. So, as torch.distributed.checkpoint commits its metadata file only after every
// rank's part is written, a save of generation G runs in two phases:
//
//   every rank   writes path.G.rank<R>            (temporary file, fsync, rename, fsync folder)
//   all ranks    max-reduce of (R's CRC-32 + 1, or 0 if R's write failed)    = "all written"
//   rank 0       writes path: no tensors; metadata = G, the layout and every shard's CRC-32
//                (atomically and durably, as a shard)                       = the commit
//   all ranks    sum-reduce of rank 0's success; then each rank removes its own shards of
//                other generations (and temporary files its killed saves left)
//
// `path` is replaced by one rename, so at any moment it names one complete generation: the
// new one from the rename on, the previous one before it, whose shards are removed only after
// the new commit. A rank killed anywhere (mpirun then ends the job) leaves at worst shards of
// a generation no commit names (a partial newer one, or the previous one when the kill came
// between the commit and the clean-up); the reader takes the commit, loads exactly the shards
// it names (generation and CRC-32 must match: a later run's partial save under the same name
// is refused, never merged) and reports the uncommitted ones, and a resumed run that saves
// under the same name removes the others at once (remove_stale_shards), even when it has
// nothing left to train and so never saves again. tests/distributed's
// checkpoint_chaos_test kills ranks at random moments and at each phase boundary.
//
// PIPEWRIGHT_CHECKPOINT_FAULT=<phase>:<rank>:<generation> makes that rank SIGKILL itself at
// that phase of that save, for that test: "shard" (before its shard), "written" (after it),
// "commit" (rank 0: after all were written, before the commit), "committed" (after the
// commit, before the clean-up).

namespace {

constexpr const char* kGenerationKey = "checkpoint.generation";
constexpr const char* kRanksKey = "layout.ranks";
constexpr const char* kReplicasKey = "layout.replicas";
constexpr const char* kShardKey = "checkpoint.shard.";  // + rank: "crc32:xxxxxxxx" of it

std::string shard_path(const std::string& path, int64_t generation, int rank) {
  return path + "." + std::to_string(generation) + ".rank" + std::to_string(rank);
}

std::string crc_text(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

void fault_point(const char* phase, int rank, int64_t generation) {
  static const std::string fault = [] {
    const char* v = std::getenv("PIPEWRIGHT_CHECKPOINT_FAULT");
    return std::string(v ? v : "");
  }();
  if (!fault.empty() && fault == std::string(phase) + ":" + std::to_string(rank) + ":" +
                                     std::to_string(generation)) {
    std::raise(SIGKILL);
  }
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

int64_t meta_int(const std::map<std::string, std::string>& meta, const std::string& key,
                 const std::string& path) {
  auto it = meta.find(key);
  if (it == meta.end()) throw std::runtime_error(path + ": no \"" + key + "\" entry");
  return std::stoll(it->second);
}

/// The names of the entries of path's folder that start with path's file name.
std::vector<std::string> names_beside(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const std::string base = p.filename().string();
  std::vector<std::string> names;
  const fs::path folder = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(base, 0) == 0) names.push_back(std::move(name));
  }
  return names;
}

/// The files `path.<generation>.rank<R>` in path's folder, by generation: the ranks found.
std::map<int64_t, std::set<int>> shards_on_disk(const std::string& path) {
  const std::string prefix = std::filesystem::path(path).filename().string() + ".";
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() < 18 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  std::map<int64_t, std::set<int>> found;
  for (const std::string& name : names_beside(path)) {
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());  // "<G>.rank<R>"
    const size_t dot = rest.find(".rank");
    if (dot == std::string::npos) continue;
    const std::string g = rest.substr(0, dot), r = rest.substr(dot + 5);
    if (digits(g) && digits(r)) found[std::stoll(g)].insert(std::stoi(r));
  }
  return found;
}

/// This rank's files of other generations than `kept`, and the temporary files of its killed
/// saves ("<shard>.tmp.<pid>"; rank 0's also "<path>.tmp.<pid>", of the commit record).
void remove_other_generations(const std::string& path, int64_t kept, int rank) {
  namespace fs = std::filesystem;
  std::error_code ignored;
  for (const auto& [generation, ranks] : shards_on_disk(path)) {
    if (generation != kept && ranks.count(rank)) {
      fs::remove(shard_path(path, generation, rank), ignored);
    }
  }
  const fs::path p(path);
  const std::string base = p.filename().string();
  const std::string mine = ".rank" + std::to_string(rank) + ".tmp.";
  for (const std::string& name : names_beside(path)) {
    const bool commit_tmp = rank == 0 && name.rfind(base + ".tmp.", 0) == 0;
    const bool shard_tmp = name.rfind(base + ".", 0) == 0 && name.find(mine) != std::string::npos;
    if (commit_tmp || shard_tmp) {
      fs::remove(p.has_parent_path() ? p.parent_path() / name : fs::path(name), ignored);
    }
  }
}

/// This rank's shard: the entries of the children of the stages it trains.
nn::NamedTensors shard_of(const pipeline::Pipe& pipe, const nn::Optimizer& optimizer) {
  std::set<int> mine;
  int child = 0;
  for (size_t s = 0; s < pipe.balance().size(); ++s) {
    for (int i = 0; i < pipe.balance()[s]; ++i, ++child) {
      if (pipe.runs_stage(static_cast<int>(s))) mine.insert(child);
    }
  }
  nn::NamedTensors shard;
  for (auto& [key, t] : nn::checkpoint_tensors(pipe.module(), optimizer)) {
    const int c = child_of(key);
    if (c < 0 || mine.count(c)) shard.emplace_back(key, t);
  }
  return shard;
}

/// The lines LoadedRunCheckpoint::ignored reports: generations after `loaded` on disk.
std::string uncommitted_after(const std::string& path, int64_t loaded, int64_t ranks) {
  std::string out;
  for (const auto& [generation, found] : shards_on_disk(path)) {
    if (generation <= loaded) continue;
    out += "ignored generation " + std::to_string(generation) + " at " + path + ": " +
           std::to_string(found.size()) + " of " + std::to_string(ranks) +
           " shards and no commit (a run stopped while saving it)\n";
  }
  return out;
}

/// The shards' entries, merged by key (the first shard holding a key gives it).
nn::NamedTensors merged(const std::vector<nn::SafetensorsFile>& files) {
  nn::NamedTensors out;
  std::set<std::string> seen;
  for (const nn::SafetensorsFile& file : files) {
    for (const auto& [key, t] : file.tensors) {
      if (seen.insert(key).second) out.emplace_back(key, t);
    }
  }
  return out;
}

std::map<std::string, std::string> without_layout(std::map<std::string, std::string> meta) {
  for (auto it = meta.begin(); it != meta.end();) {
    const bool ours = it->first.rfind("layout.", 0) == 0 || it->first.rfind("checkpoint.", 0) == 0;
    it = ours ? meta.erase(it) : std::next(it);
  }
  return meta;
}

/// Shards written before checkpoints committed (`path.rank<R>`, no commit record): loaded
/// only when every shard of the replica carries the same metadata, i.e. the same epoch.
LoadedRunCheckpoint load_unversioned(const std::string& path, int mine, pipeline::Pipe& pipe,
                                     nn::Optimizer& optimizer) {
  const std::string first = path + ".rank0";
  nn::SafetensorsFile shard0 = read_verified(first);
  const int64_t ranks = meta_int(shard0.metadata, kRanksKey, first);
  const int64_t replicas = meta_int(shard0.metadata, kReplicasKey, first);
  const int64_t workers = ranks / std::max<int64_t>(1, replicas);
  const int64_t replica = mine < replicas ? mine : 0;
  std::vector<nn::SafetensorsFile> shards;
  for (int64_t w = 0; w < workers; ++w) {
    const std::string name = path + ".rank" + std::to_string(replica * workers + w);
    if (!std::filesystem::exists(name)) {
      throw std::runtime_error(path + ": shard " + name + " of " + std::to_string(ranks) +
                               " is missing");
    }
    shards.push_back(name == first ? shard0 : read_verified(name));
    if (shards.back().metadata != shard0.metadata) {
      throw std::runtime_error(name + " and " + first + " were saved at different points of "
                               "the run (their metadata differ): not one checkpoint");
    }
  }
  nn::load_checkpoint_tensors(merged(shards), pipe.module(), optimizer, path);
  return {without_layout(shard0.metadata), ""};
}

}  // namespace

void save_run_checkpoint(const std::string& path, const pipeline::Pipe& pipe,
                         const nn::Optimizer& optimizer,
                         std::map<std::string, std::string> metadata, int64_t generation,
                         distributed::MpiProcesses* processes) {
  if (processes == nullptr) {
    nn::save_safetensors(path, nn::checkpoint_tensors(pipe.module(), optimizer), metadata);
    return;
  }
  const int rank = processes->rank();
  const int ranks = processes->workers() * processes->replicas();
  metadata[kRanksKey] = std::to_string(ranks);
  metadata[kReplicasKey] = std::to_string(processes->replicas());
  metadata[kGenerationKey] = std::to_string(generation);

  // Phase 1: every shard durable, or nothing committed.
  fault_point("shard", rank, generation);
  std::exception_ptr failed;
  std::vector<double> written(static_cast<size_t>(ranks), 0.0);
  try {
    const uint32_t crc = nn::save_safetensors(shard_path(path, generation, rank),
                                              shard_of(pipe, optimizer), metadata);
    written[static_cast<size_t>(rank)] = static_cast<double>(crc) + 1.0;
  } catch (...) {
    failed = std::current_exception();
  }
  fault_point("written", rank, generation);
  processes->max_over_job(written);
  if (failed) std::rethrow_exception(failed);
  std::string missing;
  for (int r = 0; r < ranks; ++r) {
    if (written[static_cast<size_t>(r)] == 0.0) missing += " " + std::to_string(r);
  }
  if (!missing.empty()) {
    throw std::runtime_error("checkpoint " + path + ", generation " + std::to_string(generation) +
                             ": rank(s)" + missing + " could not write their shard; not committed");
  }

  // Phase 2: the commit record, then the clean-up.
  double committed = 0.0;
  if (rank == 0) {
    fault_point("commit", rank, generation);
    std::map<std::string, std::string> commit = {{kGenerationKey, std::to_string(generation)},
                                                 {kRanksKey, metadata[kRanksKey]},
                                                 {kReplicasKey, metadata[kReplicasKey]}};
    for (int r = 0; r < ranks; ++r) {
      commit[kShardKey + std::to_string(r)] =
          crc_text(static_cast<uint32_t>(written[static_cast<size_t>(r)] - 1.0));
    }
    try {
      nn::save_safetensors(path, {}, commit);
      committed = 1.0;
    } catch (...) {
      failed = std::current_exception();
    }
  }
  committed = processes->sum_over_job(committed);
  if (failed) std::rethrow_exception(failed);
  if (committed != 1.0) {
    throw std::runtime_error("checkpoint " + path + ", generation " + std::to_string(generation) +
                             ": rank 0 could not write the commit record; not committed");
  }
  fault_point("committed", rank, generation);
  remove_other_generations(path, generation, rank);
}

LoadedRunCheckpoint load_run_checkpoint(const std::string& path, pipeline::Pipe& pipe,
                                        nn::Optimizer& optimizer,
                                        const distributed::MpiProcesses* processes) {
  namespace fs = std::filesystem;
  const int mine = processes != nullptr ? processes->replica() : 0;
  if (!fs::exists(path) && fs::exists(path + ".rank0")) {
    return load_unversioned(path, mine, pipe, optimizer);
  }
  if (!fs::exists(path)) {
    std::string found;
    for (const auto& [generation, ranks] : shards_on_disk(path)) {
      found += " " + std::to_string(generation) + " (" + std::to_string(ranks.size()) + " shards)";
    }
    throw std::runtime_error(
        "no checkpoint at " + path +
        (found.empty() ? std::string()
                       : ": there are shards of generation(s)" + found +
                             " but no commit record (the run stopped before its first "
                             "checkpoint was complete)"));
  }
  nn::SafetensorsFile file = read_verified(path);
  if (file.metadata.count(kGenerationKey) == 0) {  // one process's whole checkpoint
    nn::load_checkpoint_tensors(file.tensors, pipe.module(), optimizer, path);
    return {without_layout(file.metadata), ""};
  }
  // A commit record: the shards of its generation, of this replica (replica 0's when the run
  // that wrote them had fewer).
  const int64_t generation = meta_int(file.metadata, kGenerationKey, path);
  const int64_t ranks = meta_int(file.metadata, kRanksKey, path);
  const int64_t replicas = meta_int(file.metadata, kReplicasKey, path);
  const int64_t workers = ranks / std::max<int64_t>(1, replicas);
  const int64_t replica = mine < replicas ? mine : 0;
  std::vector<nn::SafetensorsFile> shards;
  for (int64_t w = 0; w < workers; ++w) {
    const int rank = static_cast<int>(replica * workers + w);
    const std::string name = shard_path(path, generation, rank);
    if (!fs::exists(name)) {
      throw std::runtime_error(path + " commits generation " + std::to_string(generation) +
                               ", but its shard " + name + " is missing");
    }
    nn::SafetensorsFile shard = read_verified(name);
    const std::string committed = file.metadata[kShardKey + std::to_string(rank)];
    if (crc_text(shard.checksum) != committed ||
        meta_int(shard.metadata, kGenerationKey, name) != generation) {
      throw std::runtime_error(name + " is not the shard " + path + " commits (checksum " +
                               crc_text(shard.checksum) + ", committed " + committed +
                               "): another run's save under the same name replaced it");
    }
    shards.push_back(std::move(shard));
  }
  nn::load_checkpoint_tensors(merged(shards), pipe.module(), optimizer, path);
  return {without_layout(shards.front().metadata), uncommitted_after(path, generation, ranks),
          generation};
}

void remove_stale_shards(const std::string& resume_path, const std::string& save_path,
                         int64_t committed, const distributed::MpiProcesses* processes) {
  namespace fs = std::filesystem;
  if (processes == nullptr || committed < 0 || save_path.empty()) return;
  std::error_code error;
  if (!fs::equivalent(resume_path, save_path, error) || error) return;
  remove_other_generations(resume_path, committed, processes->rank());
}

}  // namespace pipewright::examples
