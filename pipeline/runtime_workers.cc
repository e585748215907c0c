// Runtime, the part around the interpreter (runtime.cc): starting the workers on their
// devices and CPUs, running other work on them (the optimizer's per-stage parts), re-seeding
// them, the fault-injection seam, and what the last step did.
#include "pipeline/runtime.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <utility>

#include "pipeline/worker_cpus.h"
#include "tensor/stream.h"
#include "tensor/threads.h"

namespace pipewright::pipeline {

Runtime::Runtime(std::vector<nn::Sequential> partitions, std::vector<Device> stage_devices,
                 std::vector<int> stage_worker, int num_workers, uint64_t seed,
                 int intra_op_threads, SkipLayout skips, WorkerCpus cpu_policy)
    : partitions_(std::move(partitions)),
      stage_devices_(std::move(stage_devices)),
      stage_worker_(std::move(stage_worker)),
      skips_(std::move(skips)) {
  const int budget =
      intra_op_threads > 0 ? intra_op_threads : default_threads_per_worker(num_workers);
  const std::vector<Device> devices = worker_devices(stage_devices_, stage_worker_, num_workers);
  std::vector<std::vector<int>> cpus = worker_cpus(num_workers, budget, cpu_policy);
  for (int w = 0; w < num_workers; ++w) {
    workers_.push_back(std::make_unique<Worker>(w, budget, mix_seed(seed, w),
                                                devices[static_cast<size_t>(w)],
                                                std::move(cpus[static_cast<size_t>(w)])));
  }
  waiters_.resize(workers_.size());
  // The partitions were placed on their devices on the constructing thread's current streams:
  // a first fence like execute()'s entry one (Note [The caller's streams]), since a step may
  // come from another stream or thread.
  for (const auto& worker : workers_) {
    Event placed(worker->device());
    placed.record(Stream::current(worker->device()));
    placed.wait(worker->compute_stream());
  }
}

void Runtime::run_on_workers(const std::function<void(int worker)>& work) {
  std::lock_guard<std::mutex> lock(execute_mutex_);
  std::vector<int> local;
  for (int w = 0; w < num_workers(); ++w) {
    if (processes_ == nullptr || processes_->runs_worker(w)) local.push_back(w);
  }
  std::vector<Event> entered, done;  // per worker, both on the worker's device
  for (const auto& worker : workers_) {
    entered.emplace_back(worker->device());
    entered.back().record(Stream::current(worker->device()));
    done.emplace_back(worker->device());
  }
  auto countdown = std::make_shared<Countdown>(static_cast<int>(local.size()));
  for (int w : local) {
    Event* entry = &entered[static_cast<size_t>(w)];
    Event* exit = &done[static_cast<size_t>(w)];
    workers_[w]->submit([this, &work, w, entry, exit, countdown] {
      std::exception_ptr error;
      try {
        entry->wait(workers_[w]->compute_stream());
        work(w);
      } catch (...) {
        error = std::current_exception();
      }
      try {
        exit->record(workers_[w]->compute_stream());
      } catch (...) {
        if (!error) error = std::current_exception();
      }
      countdown->done(std::move(error));
    });
  }
  countdown->wait();
  for (int w : local) done[static_cast<size_t>(w)].wait(Stream::current(workers_[w]->device()));
  if (std::exception_ptr error = countdown->error()) std::rethrow_exception(error);
}

void Runtime::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(execute_mutex_);
  for (auto& w : workers_) w->generator().set_state(mix_seed(seed, w->index()), 0);
}

void Runtime::set_fault_hook(FaultHook hook) {
  std::lock_guard<std::mutex> lock(execute_mutex_);
  fault_hook_ = std::move(hook);
}

void Runtime::publish(const Step& step) {
  Trace trace = step.trace();
  std::optional<Failure> failure = step.failure();
  std::lock_guard<std::mutex> lock(last_mutex_);
  last_trace_ = std::move(trace);
  last_counters_ = step.counters;
  last_failure_ = std::move(failure);
}

std::optional<Failure> Runtime::last_failure() const {
  std::lock_guard<std::mutex> lock(last_mutex_);
  return last_failure_;
}

Trace Runtime::last_trace() const {
  std::lock_guard<std::mutex> lock(last_mutex_);
  return last_trace_;
}

StepCounters Runtime::last_counters() const {
  std::lock_guard<std::mutex> lock(last_mutex_);
  return last_counters_;
}

}  // namespace pipewright::pipeline
