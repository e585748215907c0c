#include "pipeline/worker.h"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "tensor/threads.h"

namespace pipewright::pipeline {

Worker::Worker(int index, int intra_op_threads, uint64_t seed, Device device,
               std::vector<int> cpus)
    : index_(index),
      intra_op_threads_(intra_op_threads),
      cpus_(std::move(cpus)),
      generator_(seed),
      compute_stream_(Stream::create(device)),
      thread_([this] { loop(); }) {}

Worker::~Worker() {
  jobs_.close();
  if (thread_.joinable()) thread_.join();
}

void Worker::submit(Job job) { jobs_.push(std::move(job)); }

std::exception_ptr Worker::escaped() const {
  std::lock_guard<std::mutex> lock(escaped_mutex_);
  return escaped_;
}

void Worker::loop() {
  if (!cpus_.empty()) pin_current_thread(cpus_);  // refused: the inherited mask stays
  ThreadBudgetGuard budget(intra_op_threads_);
  GeneratorGuard rng(generator_);
  StreamGuard on_compute_stream(compute_stream_);
  while (std::optional<Job> job = jobs_.pop()) {
    // A job that throws would otherwise end the process (std::terminate); keep the first
    // such exception for escaped() instead.
    try {
      (*job)();
    } catch (...) {
      std::lock_guard<std::mutex> lock(escaped_mutex_);
      if (!escaped_) escaped_ = std::current_exception();
    }
  }
}

void Countdown::done(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error && !error_) error_ = std::move(error);
  if (--count_ == 0) zero_.notify_all();
}

std::exception_ptr Countdown::error() {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void Countdown::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  zero_.wait(lock, [this] { return count_ <= 0; });
}

uint64_t mix_seed(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::vector<Device> worker_devices(const std::vector<Device>& stage_devices,
                                   const std::vector<int>& stage_worker, int num_workers) {
  if (stage_devices.size() != stage_worker.size()) {
    throw std::invalid_argument("Runtime: " + std::to_string(stage_devices.size()) +
                                " stage devices but " + std::to_string(stage_worker.size()) +
                                " stage workers");
  }
  std::vector<Device> devices(static_cast<size_t>(num_workers), Device::cpu(0));
  std::vector<int> first_stage(static_cast<size_t>(num_workers), -1);
  for (size_t s = 0; s < stage_worker.size(); ++s) {
    const int w = stage_worker[s];
    if (w < 0 || w >= num_workers) {
      throw std::invalid_argument("Runtime: stage " + std::to_string(s) + " on worker " +
                                  std::to_string(w) + " of " + std::to_string(num_workers));
    }
    const auto wi = static_cast<size_t>(w);
    if (first_stage[wi] < 0) {
      first_stage[wi] = static_cast<int>(s);
      devices[wi] = stage_devices[s];
    } else if (devices[wi] != stage_devices[s]) {
      throw std::invalid_argument(
          "Runtime: worker " + std::to_string(w) + " runs stage " +
          std::to_string(first_stage[wi]) + " on " + devices[wi].str() + " and stage " +
          std::to_string(s) + " on " + stage_devices[s].str() + " (one device per worker)");
    }
  }
  return devices;
}


void check_one_device_per_worker(const std::string& caller, const std::vector<Device>& devices) {
  if (devices.empty()) throw std::invalid_argument(caller + ": no devices");
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t k = 0; k < i; ++k) {
      if (devices[i] == devices[k]) {
        throw std::invalid_argument(caller + ": device " + devices[i].str() +
                                    " is given twice (one device per worker)");
      }
    }
  }
}

// Note [Worker CPUs]
// Which CPUs does a worker thread run on? A thread inherits its creator's affinity mask, and
// the creator's mask is not always the process's: a program built with OpenMP and run with
// OMP_PROC_BIND set has libgomp bind the initial thread to one place (one core) at start-up,
// so every worker — every stage — would share that core (the main job, when it was built with
// OpenMP: all three threads on cpu 0, 0.76x the samples/s). So each worker sets its own mask
// from process_cpus() (tensor/threads.h: the process's mask, or the union of the OpenMP places
// when libgomp has bound the caller), by PipeOptions::worker_cpus:
//   - kShared (the default): every worker on all of them, and the kernel's scheduler shares
//     the cores out;
//   - kPinned: when the workers' budgets fit (workers x budget <= CPUs), worker w on CPUs
//     [w x budget, (w + 1) x budget) of that list in topology order (cpus_by_topology: a
//     core's SMT siblings adjacent, one socket before the next), so stages share no core;
//     otherwise (more workers than cores) as kShared;
//   - kInherited (and a Pipe over processes, where a process runs one worker and mpirun
//     decides its cores): the inherited mask.
// A worker's intra-op helper threads (tensor/parallel.h), made by the worker's thread,
// inherit its mask.
// Why shared by default: pinning each stage to its own core gained nothing on a quiet machine
// (the main job 1.01x against the inherited mask), and beside one busy process it lost a
// quarter: the busy process shares a core with one pinned worker, which then runs at half
// speed and sets the whole pipeline's pace, while unpinned the scheduler spreads three
// threads over two cores (main job, 2 stages on 2 cores: 0.58x its quiet samples/s pinned,
// 0.73x shared). Measurements: docs/BENCHMARKS.md, "Worker CPUs" and "Contention".
int default_threads_per_worker(int workers) {
  return std::max(1, hardware_threads() / std::max(1, workers));
}

std::vector<std::vector<int>> worker_cpus(int num_workers, int budget, WorkerCpus policy) {
  const auto workers = static_cast<size_t>(num_workers);
  if (policy == WorkerCpus::kInherited) return std::vector<std::vector<int>>(workers);
  const std::vector<int>& all = process_cpus();
  const bool fit = workers * static_cast<size_t>(budget) <= all.size();
  if (policy == WorkerCpus::kShared || !fit) return std::vector<std::vector<int>>(workers, all);
  const std::vector<int> ordered = cpus_by_topology(all);
  std::vector<std::vector<int>> cpus(workers);
  for (int w = 0; w < num_workers; ++w) {
    const auto first = ordered.begin() + static_cast<std::ptrdiff_t>(w) * budget;
    std::vector<int>& share = cpus[static_cast<size_t>(w)];
    share.assign(first, first + budget);
    std::sort(share.begin(), share.end());
  }
  return cpus;
}

}  // namespace pipewright::pipeline
