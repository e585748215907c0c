#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "tensor/threads.h"

using namespace pipewright;

TEST_CASE("intra-op threads default to all cores and are clamped") {
  const int cores = hardware_threads();
  REQUIRE(cores >= 1);
  REQUIRE(intra_op_threads() >= 1);
  REQUIRE(intra_op_threads() <= cores);
  set_intra_op_threads(1);
  REQUIRE(intra_op_threads() == 1);
  set_intra_op_threads(0);
  REQUIRE(intra_op_threads() == 1);
  set_intra_op_threads(cores + 100);
  REQUIRE(intra_op_threads() == cores);
}

TEST_CASE("ThreadBudgetGuard sets and restores the budget") {
  set_intra_op_threads(hardware_threads());
  const int before = intra_op_threads();
  {
    ThreadBudgetGuard guard(1);
    REQUIRE(intra_op_threads() == 1);
    {
      ThreadBudgetGuard inner(hardware_threads());
      REQUIRE(intra_op_threads() == hardware_threads());
    }
    REQUIRE(intra_op_threads() == 1);
  }
  REQUIRE(intra_op_threads() == before);
}

TEST_CASE("the budget is per thread") {
  set_intra_op_threads(hardware_threads());
  int seen_in_worker = 0;
  std::thread worker([&] {
    ThreadBudgetGuard guard(1);
    seen_in_worker = intra_op_threads();
  });
  worker.join();
  REQUIRE(seen_in_worker == 1);
  REQUIRE(intra_op_threads() == hardware_threads());
}

TEST_CASE("process_cpus is the process's mask; a thread can be pinned and unpinned") {
  const std::vector<int>& cpus = process_cpus();
  REQUIRE(!cpus.empty());
  REQUIRE(std::is_sorted(cpus.begin(), cpus.end()));
  REQUIRE(hardware_threads() == static_cast<int>(cpus.size()));
  std::thread t([&] {
    // A fresh thread's mask is within the process's (this test binary sets no binding).
    const std::vector<int> inherited = current_thread_cpus();
    REQUIRE(!inherited.empty());
    for (int cpu : inherited) CHECK(std::binary_search(cpus.begin(), cpus.end(), cpu));
    REQUIRE(pin_current_thread({cpus.back()}));
    CHECK(current_thread_cpus() == std::vector<int>{cpus.back()});
    REQUIRE(pin_current_thread(cpus));
    CHECK(current_thread_cpus() == cpus);
    // Refused masks leave the thread as it was.
    CHECK_FALSE(pin_current_thread({}));
    CHECK_FALSE(pin_current_thread({-1, 1 << 20}));
    CHECK(current_thread_cpus() == cpus);
  });
  t.join();
}

namespace {

/// Runs `measured` on a thread pinned to one CPU beside another thread spinning there until
/// `measured` returns or sets its argument, so the measured thread waits for the core about
/// half the time it is runnable (the busy-process case, Note [A core shared with other work]).
/// Returns whether both threads were pinned. Catch's assertions are not thread-safe:
/// `measured` records, the test thread checks.
bool beside_a_spinning_thread(const std::function<void(std::atomic<bool>& stop)>& measured) {
  const int cpu = process_cpus().front();
  std::atomic<bool> stop{false}, other_pinned{false}, measured_pinned{false};
  std::thread other([&] {
    other_pinned = pin_current_thread({cpu});
    while (!stop.load()) {
    }
  });
  std::thread thread([&] {
    measured_pinned = pin_current_thread({cpu});
    measured(stop);
    stop = true;
  });
  thread.join();
  other.join();
  return other_pinned.load() && measured_pinned.load();
}

int64_t run_queue_ns() { return thread_sched_times().run_queue_ns; }

}  // namespace

TEST_CASE("thread_sched_times counts the time a thread waits for its core") {
  if (run_queue_ns() < 0) {
    WARN("SKIPPED (did not run, not a pass): the kernel reports no per-thread schedstat");
    return;
  }
  // Spinning 300 ms beside another spinning thread, a thread waits for it about half of the
  // time. Alone afterwards, a thread waits for nothing.
  int64_t shared = 0, alone = 0;
  const bool pinned = beside_a_spinning_thread([&](std::atomic<bool>&) {
    const int64_t before = run_queue_ns();
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    while (std::chrono::steady_clock::now() < end) {
    }
    shared = run_queue_ns() - before;
  });
  std::thread quiet([&] {
    const int64_t before = run_queue_ns();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // asleep: not runnable
    alone = run_queue_ns() - before;
  });
  quiet.join();
  REQUIRE(pinned);
  CHECK(shared > 50'000'000);  // > 50 ms of the 300
  CHECK(alone < 20'000'000);
}

TEST_CASE("thread_sched_times: time on a CPU grows while a thread runs, not while it sleeps") {
  const ThreadSchedTimes start = thread_sched_times();
  if (start.on_cpu_ns < 0) {
    WARN("SKIPPED (did not run, not a pass): the kernel reports no per-thread schedstat");
    return;
  }
  CHECK(start.run_queue_ns >= 0);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
  while (std::chrono::steady_clock::now() < end) {
  }
  const ThreadSchedTimes ran = thread_sched_times();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const ThreadSchedTimes slept = thread_sched_times();
  // 30 ms of spinning is on a CPU or waiting for one (most of it: a VM's host may take some);
  // 30 ms asleep is neither.
  CHECK(ran.on_cpu_ns - start.on_cpu_ns + ran.run_queue_ns - start.run_queue_ns >= 20'000'000);
  CHECK(slept.on_cpu_ns - ran.on_cpu_ns < 5'000'000);
}

TEST_CASE("SharedCoreWatch: shared while another thread holds the core, undecided before") {
  if (run_queue_ns() < 0) {
    WARN("SKIPPED (did not run, not a pass): the kernel reports no per-thread schedstat");
    return;
  }
  bool before_window = true, after_windows = false, asleep_kept = false;
  const bool pinned = beside_a_spinning_thread([&](std::atomic<bool>& stop) {
    SharedCoreWatch watch;
    watch.update();
    before_window = !watch.shared() && !watch.update();  // no window has closed yet
    const auto end = std::chrono::steady_clock::now() + 4 * SharedCoreWatch::kWindow;
    while (std::chrono::steady_clock::now() < end) watch.update();
    after_windows = watch.shared();
    stop = true;
    // Asleep for a window: too little runnable time to decide, so the decision stays.
    std::this_thread::sleep_for(SharedCoreWatch::kWindow + std::chrono::milliseconds(10));
    asleep_kept = watch.update();
  });
  REQUIRE(pinned);
  CHECK(before_window);
  CHECK(after_windows);
  CHECK(asleep_kept);
}

TEST_CASE("cpus_by_topology puts a core's SMT siblings together, one package before the next") {
  // 2 packages x 2 cores x 2 threads, numbered as Linux often does on x86: cpu c is thread
  // c / 4 of physical core c % 4; cores 0-1 on package 0, 2-3 on package 1 (core_id counts
  // within a package).
  auto place = [](int cpu) -> std::optional<CpuPlace> {
    if (cpu >= 8) return std::nullopt;  // unknown
    const int core = cpu % 4;
    return CpuPlace{core / 2, core % 2};
  };
  CHECK(cpus_by_topology({0, 1, 2, 3, 4, 5, 6, 7}, place) ==
        std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7});
  // Shares of 2 are then whole cores, shares of 4 whole packages. CPUs without a known place
  // keep their order after the others.
  CHECK(cpus_by_topology({9, 7, 8, 0, 3, 4}, place) == std::vector<int>{0, 4, 3, 7, 9, 8});
  CHECK(cpus_by_topology({}, place).empty());
  // This machine's own topology: a permutation of the process's CPUs.
  std::vector<int> mine = cpus_by_topology(process_cpus());
  std::sort(mine.begin(), mine.end());
  CHECK(mine == process_cpus());
}
