// What load_run_checkpoint takes from disk (Note [Checkpoints that commit],
// examples/common/run_checkpoint.cc), one process reading what 2 ranks wrote: the files are
// written here as the ranks would (a shard per rank, then the commit record with each shard's
// CRC-32), then bent: an uncommitted newer generation, a shard replaced by another save, a
// missing shard, no commit at all, and the unversioned shards of earlier versions.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "examples/common/run_checkpoint.h"
#include "nn/linear.h"
#include "nn/optim.h"
#include "nn/safetensors.h"
#include "nn/serialize.h"
#include "pipeline/pipe.h"
#include "tensor/generator.h"

using namespace pipewright;
namespace fs = std::filesystem;

namespace {

nn::Sequential model(uint64_t seed) {
  Generator g(seed);
  GeneratorGuard guard(g);
  nn::Sequential m;
  m.push_back(nn::Linear(3, 4));
  m.push_back(nn::Linear(4, 2));
  return m;
}

pipeline::Pipe two_stages(uint64_t seed) {
  return pipeline::Pipe(model(seed), {.balance = {1, 1},
                                      .devices = {Device::cpu(0), Device::cpu(1)},
                                      .chunks = 1});
}

std::string folder() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(tmp ? tmp : "/tmp") / "run_checkpoint";
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string hex(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

// Writes generation g of a 2-rank (2 workers, 1 replica) run of `seed`'s model as rank r would:
// child r's entries and the hyperparameters. Returns the shard's CRC-32.
uint32_t write_shard(const std::string& path, int64_t g, int r, uint64_t seed,
                     const std::string& epoch) {
  pipeline::Pipe pipe = two_stages(seed);
  nn::SGD opt(pipe.parameters(), {.lr = 0.1});
  nn::NamedTensors shard;
  for (auto& [key, t] : nn::checkpoint_tensors(pipe.module(), opt)) {
    const bool other = key.rfind("model." + std::to_string(1 - r) + ".", 0) == 0;
    if (!other) shard.emplace_back(key, t);
  }
  return nn::save_safetensors(path + "." + std::to_string(g) + ".rank" + std::to_string(r), shard,
                              {{"epoch", epoch},
                               {"layout.ranks", "2"},
                               {"layout.replicas", "1"},
                               {"checkpoint.generation", std::to_string(g)}});
}

void write_commit(const std::string& path, int64_t g, uint32_t crc0, uint32_t crc1) {
  nn::save_safetensors(path, {},
                       {{"checkpoint.generation", std::to_string(g)},
                        {"layout.ranks", "2"},
                        {"layout.replicas", "1"},
                        {"checkpoint.shard.0", hex(crc0)},
                        {"checkpoint.shard.1", hex(crc1)}});
}

std::string bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

// Whether `pipe`'s parameters are bitwise those of `seed`'s model.
bool holds_model(pipeline::Pipe& pipe, uint64_t seed) {
  const nn::Sequential expected = model(seed);
  const nn::NamedTensors a = pipe.module().named_parameters(), b = expected.named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    if (bytes_of(a[i].second) != bytes_of(b[i].second)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("a commit record loads the shards it names, and reports a newer partial save") {
  const std::string path = folder() + "/ckpt";
  write_commit(path, 2, write_shard(path, 2, 0, 7, "2"), write_shard(path, 2, 1, 7, "2"));
  write_shard(path, 3, 1, 8, "3");  // a save of epoch 3 that only rank 1 finished
  pipeline::Pipe pipe = two_stages(1);
  nn::SGD opt(pipe.parameters(), {.lr = 0.5});
  const examples::LoadedRunCheckpoint loaded =
      examples::load_run_checkpoint(path, pipe, opt, nullptr);
  REQUIRE(holds_model(pipe, 7));
  REQUIRE(opt.lr() == 0.1);
  REQUIRE(loaded.metadata == std::map<std::string, std::string>{{"epoch", "2"}});
  REQUIRE(loaded.ignored == "ignored generation 3 at " + path +
                                ": 1 of 2 shards and no commit (a run stopped while saving it)\n");
}

TEST_CASE("a shard that is not the one committed, or is missing, is refused") {
  const std::string path = folder() + "/ckpt";
  const uint32_t crc0 = write_shard(path, 2, 0, 7, "2");
  write_commit(path, 2, crc0, write_shard(path, 2, 1, 7, "2"));
  // Another run (other weights) saving under the same name was killed after its rank 1.
  write_shard(path, 2, 1, 9, "2");
  pipeline::Pipe pipe = two_stages(1);
  nn::SGD opt(pipe.parameters(), {.lr = 0.5});
  REQUIRE_THROWS_WITH(examples::load_run_checkpoint(path, pipe, opt, nullptr),
                      Catch::Contains(path + ".2.rank1 is not the shard " + path + " commits") &&
                          Catch::Contains("another run's save under the same name replaced it"));
  REQUIRE(holds_model(pipe, 1));  // nothing loaded
  fs::remove(path + ".2.rank1");
  REQUIRE_THROWS_WITH(examples::load_run_checkpoint(path, pipe, opt, nullptr),
                      Catch::EndsWith("commits generation 2, but its shard " + path +
                                      ".2.rank1 is missing"));
}

TEST_CASE("shards without a commit record are no checkpoint, and say so") {
  const std::string path = folder() + "/ckpt";
  write_shard(path, 1, 0, 7, "1");
  pipeline::Pipe pipe = two_stages(1);
  nn::SGD opt(pipe.parameters(), {.lr = 0.5});
  REQUIRE_THROWS_WITH(
      examples::load_run_checkpoint(path, pipe, opt, nullptr),
      "no checkpoint at " + path +
          ": there are shards of generation(s) 1 (1 shards) but no commit record (the run "
          "stopped before its first checkpoint was complete)");
}

TEST_CASE("unversioned shards of earlier versions load when they are of one epoch") {
  const std::string path = folder() + "/old";
  pipeline::Pipe writer = two_stages(7);
  nn::SGD written(writer.parameters(), {.lr = 0.1});
  const nn::NamedTensors all = nn::checkpoint_tensors(writer.module(), written);
  auto write_old = [&](int r, const std::string& epoch) {
    nn::NamedTensors shard;
    for (const auto& [key, t] : all) {
      if (key.rfind("model." + std::to_string(1 - r) + ".", 0) != 0) shard.emplace_back(key, t);
    }
    nn::save_safetensors(path + ".rank" + std::to_string(r), shard,
                         {{"epoch", epoch}, {"layout.ranks", "2"}, {"layout.replicas", "1"}});
  };
  write_old(0, "3");
  write_old(1, "4");  // killed between the ranks' saves of epoch 4
  pipeline::Pipe pipe = two_stages(1);
  nn::SGD opt(pipe.parameters(), {.lr = 0.5});
  REQUIRE_THROWS_WITH(examples::load_run_checkpoint(path, pipe, opt, nullptr),
                      Catch::Contains("were saved at different points of the run"));
  write_old(1, "3");
  REQUIRE(examples::load_run_checkpoint(path, pipe, opt, nullptr).metadata.at("epoch") == "3");
  REQUIRE(holds_model(pipe, 7));
}
