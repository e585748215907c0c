#include "pipeline/worker.h"

#include <exception>
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

}  // namespace pipewright::pipeline
