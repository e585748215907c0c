// Crash safety of the example's --save: the fashion_mnist binary runs as a child
// process with --save (resuming with --resume from whatever is on disk) and is killed with
// SIGKILL at random moments, at least 50 times, many of them inside a checkpoint write.
// After every kill the checkpoint on disk must load with its checksum verified, at an epoch
// no older than the last one seen; at the end, --resume runs to the last epoch and its
// checkpoint equals, bit for bit, that of a run never interrupted. Tiny settings (200 random
// images, hidden 16) keep each run to a fraction of a second.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "nn/safetensors.h"
#include "tests/compare.h"

extern char** environ;

namespace fs = std::filesystem;
namespace nn = pipewright::nn;

namespace {

constexpr int kEpochs = 30;

// An uncompressed IDX file of unsigned bytes.
void write_idx(const fs::path& path, const std::vector<uint32_t>& dims, std::mt19937& rng,
               int modulo) {
  std::string bytes = {0, 0, 8, static_cast<char>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) bytes += static_cast<char>((d >> s) & 0xff);
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) bytes += static_cast<char>(rng() % modulo);
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

std::string binary() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  REQUIRE(srcdir != nullptr);
  return std::string(srcdir) + "/" + (workspace ? workspace : "pipewright") +
         "/examples/fashion_mnist";
}

// Starts the example; returns its pid. stdout/stderr go to `log`.
pid_t start(const std::string& data_dir, const std::string& save, bool resume,
            const std::string& log) {
  std::vector<std::string> args = {binary(),
                                   "--epochs",
                                   std::to_string(kEpochs),
                                   "--batch-size",
                                   "50",
                                   "--hidden",
                                   "16",
                                   "--chunks",
                                   "2",
                                   "--workers",
                                   "2",
                                   "--threads",
                                   "1",
                                   "--optimizer",
                                   "sgd",
                                   "--train-limit",
                                   "200",
                                   "--test-limit",
                                   "50",
                                   "--seed",
                                   "3",
                                   "--no-progress",
                                   "--data-dir",
                                   data_dir,
                                   "--save",
                                   save};
  if (resume) args.insert(args.end(), {"--resume", save});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

int epoch_of(const nn::SafetensorsFile& f) { return std::stoi(f.metadata.at("epoch")); }

}  // namespace

TEST_CASE("SIGKILL during --save, 50+ times: the checkpoint is always whole, --resume is exact") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(tmp ? tmp : "/tmp") / "kill";
  fs::remove_all(dir);
  fs::create_directories(dir / "data");
  std::mt19937 rng(17);
  write_idx(dir / "data/train-images-idx3-ubyte", {200, 28, 28}, rng, 256);
  write_idx(dir / "data/train-labels-idx1-ubyte", {200}, rng, 10);
  write_idx(dir / "data/t10k-images-idx3-ubyte", {50, 28, 28}, rng, 256);
  write_idx(dir / "data/t10k-labels-idx1-ubyte", {50}, rng, 10);
  const std::string data = (dir / "data").string(), log = (dir / "log.txt").string();

  // The uninterrupted run.
  const std::string reference = (dir / "reference.safetensors").string();
  const auto t0 = std::chrono::steady_clock::now();
  int status = wait_for(start(data, reference, false, log));
  // Kill moments are drawn within 90 % of this run's length, whatever the machine's speed (a
  // sampling range, not a timing assertion).
  const int run_us = static_cast<int>(std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::steady_clock::now() - t0)
                                          .count());
  const int max_delay_us = std::max(1000, run_us * 9 / 10);
  INFO(read_text(log));
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  const nn::SafetensorsFile ref = nn::load_safetensors(reference);
  REQUIRE(epoch_of(ref) == kEpochs);

  const std::string ckpt = (dir / "ckpt.safetensors").string();
  int kills = 0, inside_write = 0, completed = 0, last_epoch = 0;
  for (int round = 0; kills < 50 && round < 300; ++round) {
    CAPTURE(round, kills, last_epoch);
    const pid_t pid = start(data, ckpt, fs::exists(ckpt), log);
    ::usleep(std::uniform_int_distribution<int>(0, max_delay_us)(rng));
    ::kill(pid, SIGKILL);
    status = wait_for(pid);
    if (WIFEXITED(status)) {  // finished before the kill: start a new run from scratch
      INFO(read_text(log));
      REQUIRE(WEXITSTATUS(status) == 0);
      REQUIRE(epoch_of(nn::load_safetensors(ckpt)) == kEpochs);
      ++completed;
      fs::remove(ckpt);
      last_epoch = 0;
      continue;
    }
    REQUIRE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
    ++kills;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().filename().string().find(".tmp.") != std::string::npos) {
        ++inside_write;  // killed inside a save: its temporary file is left, never the target
        fs::remove(e.path());
      }
    }
    if (!fs::exists(ckpt)) {
      REQUIRE(last_epoch == 0);  // killed before the first save of a run
      continue;
    }
    const nn::SafetensorsFile f = nn::load_safetensors(ckpt);  // throws if not whole
    REQUIRE(f.verified);
    REQUIRE(epoch_of(f) >= last_epoch);  // the previous complete checkpoint or a newer one
    last_epoch = epoch_of(f);
  }
  REQUIRE(kills >= 50);

  // Resume to the end: bit for bit the uninterrupted run's checkpoint.
  status = wait_for(start(data, ckpt, fs::exists(ckpt), log));
  INFO(read_text(log));
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  const nn::SafetensorsFile resumed = nn::load_safetensors(ckpt);
  REQUIRE(resumed.metadata == ref.metadata);
  REQUIRE(pipewright::testing::bitwise_equal(resumed.tensors, ref.tensors));
  std::printf(
      "uninterrupted run %d ms; %d kills (%d inside a checkpoint write), %d runs completed "
      "before their kill; every checkpoint whole; resume bitwise equal to the uninterrupted "
      "run\n",
      run_us / 1000, kills, inside_write, completed);
}
