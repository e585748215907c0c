// Crash safety of save_checkpoint: a child process saves checkpoints of epoch
// k = start, start + 1, ... to one path, and is killed with SIGKILL 60 times: at random
// moments, and half the time just after it announced that a save began (inside the write).
// After every kill the file on disk must load (checksum verified) and be exactly the last
// or the new complete checkpoint, never older than one already seen; the next child resumes
// from what is on disk. The child is this test binary re-executed (no fork of a process
// that may run OpenMP threads).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "nn/linear.h"
#include "nn/optim.h"
#include "nn/sequential.h"
#include "nn/serialize.h"
#include "tensor/tensor.h"
#include "tests/compare.h"

extern char** environ;

using namespace pipewright;
using pipewright::testing::bitwise_equal;
namespace fs = std::filesystem;

namespace {

constexpr const char* kChildEnv = "PIPEWRIGHT_KILL_TEST_CHILD";  // "<path> <first epoch>"

nn::Sequential model() { return nn::Sequential{nn::Linear(512, 512), nn::Linear(512, 256)}; }

// The exact state of epoch k: every parameter and momentum buffer a function of k.
void set_epoch_state(nn::Sequential& m, nn::SGD& opt, int k) {
  float v = static_cast<float>(k);
  for (const Tensor& p : m.parameters()) {
    Tensor t = p;
    t.copy_from(Tensor::full(p.shape(), v));
    v += 0.5f;
  }
  // One step from a zero gradient gives every momentum buffer a defined value.
  for (const Tensor& p : m.parameters()) {
    Tensor t = p;
    t.set_grad(Tensor::full(p.shape(), static_cast<float>(k) * 0.25f));
  }
  opt.step();
}

// Runs in the child: saves epochs first, first + 1, ... forever, announcing each on stdout.
[[noreturn]] void child_main(const std::string& spec) {
  const size_t space = spec.rfind(' ');
  const std::string path = spec.substr(0, space);
  int k = std::stoi(spec.substr(space + 1));
  nn::Sequential m = model();
  for (;; ++k) {
    nn::SGD opt(m.parameters(), {.lr = 0.1, .momentum = 0.9});  // no history: epoch k alone
    set_epoch_state(m, opt, k);
    std::printf("S %d\n", k);
    std::fflush(stdout);
    nn::save_checkpoint(path, m, opt, {{"epoch", std::to_string(k)}});
    std::printf("E %d\n", k);
    std::fflush(stdout);
  }
}

// Before main(): a child re-executed by the test never reaches Catch.
const bool kIsChild = [] {
  if (const char* spec = std::getenv(kChildEnv)) child_main(spec);
  return false;
}();

}  // namespace

TEST_CASE("SIGKILL at random moments, inside the write too: the checkpoint is always whole") {
  REQUIRE_FALSE(kIsChild);
  const char* root = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(root ? root : "/tmp") / ("kill_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "ckpt.safetensors").string();
  std::mt19937 rng(17);
  int last_epoch = 0, kills = 0, inside_write = 0, temp_files = 0;
  for (int round = 0; round < 60; ++round) {
    CAPTURE(round, last_epoch);
    int out[2];
    REQUIRE(::pipe(out) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    const std::string env =
        std::string(kChildEnv) + "=" + path + " " + std::to_string(last_epoch + 1);
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    envp.push_back(const_cast<char*>(env.c_str()));
    envp.push_back(nullptr);
    char self[] = "/proc/self/exe";
    char* argv[] = {self, nullptr};
    pid_t pid = 0;
    REQUIRE(posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv, envp.data()) == 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    FILE* from_child = ::fdopen(out[0], "r");

    // Odd rounds: wait until a save has begun (after a few complete ones), then kill within
    // 0-3 ms; even rounds: kill after a random 0-80 ms, wherever the child is.
    if (round % 2 == 1) {
      const int saves = std::uniform_int_distribution<int>(0, 2)(rng);
      char kind = 0;
      int k = 0, begun = 0;
      while (std::fscanf(from_child, " %c %d", &kind, &k) == 2) {
        if (kind == 'S' && begun++ == saves) break;
      }
      ::usleep(std::uniform_int_distribution<int>(0, 3000)(rng));
    } else {
      ::usleep(std::uniform_int_distribution<int>(0, 80000)(rng));
    }
    REQUIRE(::kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    std::fclose(from_child);
    REQUIRE(WIFSIGNALED(status));  // killed, not exited: an error in the child would show here
    ++kills;

    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().filename().string().find(".tmp.") != std::string::npos) {
        ++temp_files;  // a save cut short: its temporary file, never the checkpoint
        fs::remove(e.path());
        if (round % 2 == 1) ++inside_write;
      }
    }
    if (!fs::exists(path)) {
      REQUIRE(last_epoch == 0);  // nothing saved yet
      continue;
    }
    nn::Sequential loaded = model();
    nn::SGD opt(loaded.parameters(), {.lr = 0.1, .momentum = 0.9});
    const auto meta = nn::load_checkpoint(path, loaded, opt);  // throws if not whole
    const int epoch = std::stoi(meta.at("epoch"));
    REQUIRE(epoch >= last_epoch);  // the previous complete one, or newer
    nn::Sequential expected = model();
    nn::SGD expected_opt(expected.parameters(), {.lr = 0.1, .momentum = 0.9});
    set_epoch_state(expected, expected_opt, epoch);
    REQUIRE(bitwise_equal(loaded.state_dict(), expected.state_dict()));
    REQUIRE(bitwise_equal(opt.state_dict(), expected_opt.state_dict()));
    last_epoch = epoch;
  }
  std::printf(
      "%d kills, %d inside a write (temporary file left), %d temporary files in all; "
      "last complete epoch %d; every checkpoint on disk whole\n",
      kills, inside_write, temp_files, last_epoch);
  REQUIRE(kills == 60);
  REQUIRE(last_epoch > 0);
  fs::remove_all(dir);
}
