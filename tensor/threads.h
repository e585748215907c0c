// Intra-op threads of CPU devices.
//
// Policy (documented in docs/architecture.md): the machine has hardware_threads() cores.
// A thread running CPU kernels uses intra_op_threads() threads for large kernels (GEMM blocks,
// elementwise loops: run_parts, tensor/parallel.h). By default that is all cores. When several CPU
// devices compute at once (pipeline stages, one worker thread each), the pipeline gives each
// worker max(1, cores / active_workers) threads with ThreadBudgetGuard, so the total never
// oversubscribes the cores. The setting is per calling thread.
//
// Which cores: process_cpus(), the process's affinity mask (what mpirun --bind-to, taskset or
// a container's cpuset allow), not every online CPU. The pipeline lets each worker thread run
// on all of them, or pins it to its own share on request (Note [Worker CPUs] in
// pipeline/worker.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace pipewright {

/// The CPUs this process may run on, ascending, never empty: the calling thread's affinity
/// mask (sched_getaffinity) the first time any thread asks, cached for the process's life.
/// In a build with OpenMP (-fopenmp; pipewright's own has none), when libgomp has bound that
/// thread to one OpenMP place (OMP_PROC_BIND set: it binds the initial thread at start-up,
/// and every thread it starts inherits that one place), the union of all places instead,
/// which libgomp built from the mask the process started with.
/// Where affinity cannot be read: 0 .. std::thread::hardware_concurrency() - 1.
const std::vector<int>& process_cpus();
/// The calling thread's affinity mask, ascending (empty where it cannot be read).
std::vector<int> current_thread_cpus();
/// Restricts the calling thread to `cpus` (sched_setaffinity). Returns false, leaving the
/// mask as it was, when `cpus` is empty or the system refuses it (no CPU of it allowed).
bool pin_current_thread(const std::vector<int>& cpus);

/// The calling thread's time on a CPU and its time runnable but waiting for one, since it
/// started, in nanoseconds (Linux's /proc/thread-self/schedstat, its first two fields); both
/// -1 where the kernel does not report them. The wait grows while another thread or process
/// holds the thread's core.
struct ThreadSchedTimes {
  int64_t on_cpu_ns = -1;
  int64_t run_queue_ns = -1;
};
ThreadSchedTimes thread_sched_times();

/// Note [A core shared with other work]
/// Whether the calling thread shares its core with other runnable work (another process, or
/// more runnable threads than cores), judged over windows: shared() is true while, in the
/// last window that closed, the thread waited for a CPU more than kShare of the time it was
/// runnable (on a CPU or waiting for one; time asleep counts for nothing). A window closes
/// at the first update() at least kWindow after it began in which the thread was runnable
/// for at least kWindow / 10 (a thread that mostly sleeps keeps its window open longer, so
/// one slow wake-up does not decide). The waits that spin (run_parts' helpers,
/// tensor/parallel.h; the pipeline workers' receive, pipeline/runtime.cc) spin less or not
/// at all while it is true: a spin then spends time the core's other work needs, and the
/// thread it waits for may be the one kept off the core.
class SharedCoreWatch {
 public:
  static constexpr double kShare = 0.1;
  static constexpr std::chrono::milliseconds kWindow{50};

  /// Call from the watched thread, as often as convenient: reads the clock, and when the
  /// window can close, the thread's times (one pread of schedstat, ~2 µs). Returns shared().
  bool update();
  /// The decision of the last window that closed: false until one has, and always where the
  /// kernel does not report the times.
  bool shared() const { return shared_; }

 private:
  std::chrono::steady_clock::time_point window_start_{};
  ThreadSchedTimes at_start_;
  bool shared_ = false;
};

/// Where a logical CPU sits: its package (socket) and its physical core within it.
struct CpuPlace {
  int package = 0;
  int core = 0;
};
/// `cpus` reordered so that the logical CPUs of one physical core are adjacent and the cores
/// of one package come before the next package's: sorted by (package, core, cpu), with
/// `place(cpu)` giving each CPU's place (nullopt: unknown; those keep their order after the
/// known ones). Cutting the result into consecutive shares gives each share whole cores of
/// one package where the counts allow, where the CPU numbers alone would often pair a core's
/// first thread in one share with its SMT sibling in another (Linux numbers the siblings
/// n and n + cores on many x86 machines).
std::vector<int> cpus_by_topology(const std::vector<int>& cpus,
                                  const std::function<std::optional<CpuPlace>(int)>& place);
/// The same with each CPU's place read from /sys/devices/system/cpu/cpuN/topology
/// (physical_package_id, core_id).
std::vector<int> cpus_by_topology(const std::vector<int>& cpus);

/// Cores available to this process: process_cpus().size().
int hardware_threads();
/// Threads the calling thread's CPU kernels may use.
int intra_op_threads();
/// Sets the calling thread's intra-op threads (clamped to [1, hardware_threads()]).
void set_intra_op_threads(int n);

/// Sets the calling thread's intra-op threads for its lifetime, then restores them.
class ThreadBudgetGuard {
 public:
  explicit ThreadBudgetGuard(int n);
  ~ThreadBudgetGuard();
  ThreadBudgetGuard(const ThreadBudgetGuard&) = delete;
  ThreadBudgetGuard& operator=(const ThreadBudgetGuard&) = delete;

 private:
  int previous_;
};

}  // namespace pipewright
