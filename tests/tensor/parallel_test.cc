// run_parts (tensor/parallel.h): every part exactly once, on at most the budget's threads, the
// calling thread's helpers made once and kept, nested calls, many calls back to back from
// several threads at once, and a part that the scheduler delays does not hold the others
// (they take the remaining parts); the waiting helpers sleep (they use no CPU between calls).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tensor/parallel.h"
#include "tensor/threads.h"

using namespace pipewright;

namespace {

/// The intra-op helper threads of this process (named kHelperThreadName) and their CPU time in
/// clock ticks (utime + stime of /proc/self/task/<tid>/stat). Only theirs: the process's other
/// threads (OpenBLAS's own, which spin for a while after start-up) do not count.
struct HelperCpu {
  int threads = 0;
  int64_t ticks = 0;
};
HelperCpu helper_cpu() {
  HelperCpu cpu;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != kHelperThreadName) continue;
    std::ifstream stat_file(task.path() / "stat");
    std::string stat;
    std::getline(stat_file, stat);
    // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));
    std::vector<std::string> f{std::istream_iterator<std::string>(fields), {}};
    cpu.ticks += std::stoll(f.at(11)) + std::stoll(f.at(12));
    ++cpu.threads;
  }
  return cpu;
}

}  // namespace

TEST_CASE("run_parts runs every part exactly once, on the caller and its helpers") {
  ThreadBudgetGuard budget(hardware_threads());
  for (int64_t parts : {1, 2, 3, 7, 64, 1000}) {
    CAPTURE(parts);
    std::vector<std::atomic<int>> count(static_cast<size_t>(parts));
    std::mutex mutex;
    std::set<std::thread::id> threads;
    run_parts(parts, [&](int64_t p) {
      count[static_cast<size_t>(p)].fetch_add(1);
      std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
    });
    for (const auto& c : count) REQUIRE(c.load() == 1);
    CHECK(threads.size() <= static_cast<size_t>(std::min<int64_t>(parts, hardware_threads())));
  }
  CHECK(helper_threads() == hardware_threads() - 1);  // made once, kept
  run_parts(0, [](int64_t) { FAIL("no part to run"); });
}

TEST_CASE("a budget of one thread runs every part on the caller, in order") {
  ThreadBudgetGuard budget(1);
  std::vector<int64_t> order;
  const std::thread::id caller = std::this_thread::get_id();
  run_parts(5, [&](int64_t p) {
    REQUIRE(std::this_thread::get_id() == caller);
    order.push_back(p);
  });
  CHECK(order == std::vector<int64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("run_parts from several threads at once, back to back, and nested") {
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&] {
      ThreadBudgetGuard budget(hardware_threads());
      for (int call = 0; call < 2000; ++call) {
        run_parts(4, [&](int64_t) { total.fetch_add(1); });
      }
      run_parts(3, [&](int64_t) { run_parts(2, [&](int64_t) { total.fetch_add(1); }); });
    });
  }
  for (std::thread& c : callers) c.join();
  CHECK(total.load() == 3 * (2000 * 4 + 3 * 2));
}

TEST_CASE("a run_parts inside a part runs on that part's thread alone") {
  ThreadBudgetGuard budget(hardware_threads());
  std::atomic<int> foreign{0};
  run_parts(4, [&](int64_t) {
    const std::thread::id outer = std::this_thread::get_id();
    run_parts(8, [&](int64_t) {
      if (std::this_thread::get_id() != outer) foreign.fetch_add(1);
    });
  });
  CHECK(foreign.load() == 0);
}

TEST_CASE("a part held up does not hold up the others: the running threads take them") {
  if (hardware_threads() < 2) return;  // one thread runs everything in order
  ThreadBudgetGuard budget(2);
  std::atomic<int> taken_by_caller{0};
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> held{false};
  run_parts(40, [&](int64_t) {
    if (std::this_thread::get_id() == caller) {
      taken_by_caller.fetch_add(1);
    } else if (!held.exchange(true)) {
      // The first part the helper takes, whenever it starts (on a loaded machine the caller
      // may have run many parts by then), is held up 200 ms, as if the scheduler had put the
      // helper behind another process.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  // The caller did the rest while the helper slept: the helper ran its held-up part alone
  // (or none at all, if the caller finished first); one more part of slack for a caller
  // descheduled that long.
  CHECK(taken_by_caller.load() >= 38);
}

TEST_CASE("helpers waiting between calls sleep: no CPU burnt while idle") {
  if (hardware_threads() < 2) return;
  ThreadBudgetGuard budget(2);
  run_parts(8, [](int64_t) {});  // helpers exist and are waiting now
  const HelperCpu before = helper_cpu();
  REQUIRE(before.threads >= 1);  // this thread's helpers, found by their name
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double burnt = static_cast<double>(helper_cpu().ticks - before.ticks) /
                       static_cast<double>(sysconf(_SC_CLK_TCK));
  // A spinning helper would burn ~0.5 s of CPU here; a sleeping one only its short spin
  // (spin_microseconds(), 200 us by default), far below one tick.
  CHECK(burnt <= 0.02);
}
