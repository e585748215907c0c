// Intra-op threads: the setting is the calling thread's own; run_parts (tensor/parallel.h)
// reads it. OpenMP runs nothing here (Note [Waiting without burning a core]); its places are
// read only to learn the process's CPUs when OMP_PROC_BIND had libgomp bind the main thread.
#include "tensor/threads.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace pipewright {

namespace {

std::vector<int> all_online_cpus() {
  std::vector<int> cpus(std::max(1u, std::thread::hardware_concurrency()));
  for (size_t i = 0; i < cpus.size(); ++i) cpus[i] = static_cast<int>(i);
  return cpus;
}

std::vector<int> find_process_cpus() {
#ifdef _OPENMP
  // OMP_PROC_BIND set: libgomp bound this (initial) thread to its first place at start-up;
  // the places together are the mask the process began with.
  if (omp_get_proc_bind() != omp_proc_bind_false && omp_get_num_places() > 0) {
    std::set<int> cpus;
    for (int place = 0; place < omp_get_num_places(); ++place) {
      std::vector<int> ids(static_cast<size_t>(omp_get_place_num_procs(place)));
      omp_get_place_proc_ids(place, ids.data());
      cpus.insert(ids.begin(), ids.end());
    }
    if (!cpus.empty()) return {cpus.begin(), cpus.end()};
  }
#endif
  std::vector<int> cpus = current_thread_cpus();
  return cpus.empty() ? all_online_cpus() : cpus;
}

}  // namespace

const std::vector<int>& process_cpus() {
  static const std::vector<int> cpus = find_process_cpus();
  return cpus;
}

ThreadSchedTimes thread_sched_times() {
  // The file stays open for the thread's life: a read is then one pread (2 us here, against
  // 10-12 us to open, read and close it each time).
  struct Schedstat {
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    ~Schedstat() {
      if (fd >= 0) close(fd);
    }
  };
  thread_local const Schedstat file;
  if (file.fd < 0) return {};
  char text[128];
  const ssize_t size = pread(file.fd, text, sizeof text - 1, 0);
  if (size <= 0) return {};
  text[size] = '\0';
  unsigned long long on_cpu = 0, waiting = 0;
  if (std::sscanf(text, "%llu %llu", &on_cpu, &waiting) != 2) return {};
  return {static_cast<int64_t>(on_cpu), static_cast<int64_t>(waiting)};
}

bool SharedCoreWatch::update() {
  const auto now = std::chrono::steady_clock::now();
  if (now - window_start_ < kWindow) return shared_;
  const ThreadSchedTimes times = thread_sched_times();
  if (times.run_queue_ns < 0 || at_start_.run_queue_ns < 0) {  // the first window, or no data
    window_start_ = now;
    at_start_ = times;
    return shared_;
  }
  const int64_t waited = times.run_queue_ns - at_start_.run_queue_ns;
  const int64_t runnable = times.on_cpu_ns - at_start_.on_cpu_ns + waited;
  if (std::chrono::nanoseconds(runnable) < kWindow / 10) return shared_;  // keep it open
  shared_ = static_cast<double>(waited) > kShare * static_cast<double>(runnable);
  window_start_ = now;
  at_start_ = times;
  return shared_;
}

std::vector<int> current_thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

bool pin_current_thread(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  bool any = false;
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) continue;
    CPU_SET(cpu, &set);
    any = true;
  }
  return any && sched_setaffinity(0, sizeof(set), &set) == 0;
}

namespace {
thread_local int tls_intra_op_threads = 0;  // 0: not set, use hardware_threads()
}

std::vector<int> cpus_by_topology(const std::vector<int>& cpus,
                                  const std::function<std::optional<CpuPlace>(int)>& place) {
  struct Entry {
    bool known;
    CpuPlace where;
    size_t order;  // position in `cpus`
    int cpu;
  };
  std::vector<Entry> entries;
  entries.reserve(cpus.size());
  for (size_t i = 0; i < cpus.size(); ++i) {
    const std::optional<CpuPlace> p = place(cpus[i]);
    entries.push_back({p.has_value(), p.value_or(CpuPlace{}), i, cpus[i]});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.known != b.known) return a.known;
    if (!a.known) return a.order < b.order;
    if (a.where.package != b.where.package) return a.where.package < b.where.package;
    if (a.where.core != b.where.core) return a.where.core < b.where.core;
    return a.cpu < b.cpu;
  });
  std::vector<int> ordered;
  ordered.reserve(entries.size());
  for (const Entry& e : entries) ordered.push_back(e.cpu);
  return ordered;
}

std::vector<int> cpus_by_topology(const std::vector<int>& cpus) {
  auto read_int = [](const std::string& path) -> std::optional<int> {
    std::ifstream in(path);
    int value = 0;
    if (!(in >> value)) return std::nullopt;
    return value;
  };
  return cpus_by_topology(cpus, [&](int cpu) -> std::optional<CpuPlace> {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    const std::optional<int> package = read_int(dir + "physical_package_id");
    const std::optional<int> core = read_int(dir + "core_id");
    if (!package || !core) return std::nullopt;
    return CpuPlace{*package, *core};
  });
}

int hardware_threads() { return static_cast<int>(process_cpus().size()); }

int intra_op_threads() {
  return tls_intra_op_threads > 0 ? std::min(tls_intra_op_threads, hardware_threads())
                                  : hardware_threads();
}

void set_intra_op_threads(int n) { tls_intra_op_threads = std::clamp(n, 1, hardware_threads()); }

ThreadBudgetGuard::ThreadBudgetGuard(int n) : previous_(intra_op_threads()) {
  set_intra_op_threads(n);
}

ThreadBudgetGuard::~ThreadBudgetGuard() { set_intra_op_threads(previous_); }

}  // namespace pipewright
