// Worker: one persistent thread that runs the pipeline actions of one worker (one device).
//
// A Pipe owns p workers for its whole life (torchgpipe spawned threads per device too, but
// left them to the interpreter's exit, which is how it hung at shutdown). Each worker thread:
//   - installs its own Generator with GeneratorGuard, so Dropout inside its stages draws
//     from a stream the runtime can save and replay (Note [Replaying randomness] in cell.h);
//   - limits its intra-op threads with ThreadBudgetGuard(max(1, cores / workers)), so p
//     workers computing at once never oversubscribe the cores (tensor/threads.h), and runs
//     on the CPUs the runtime gives it (Note [Worker CPUs] in worker.cc);
//   - computes on its own stream: compute_stream(), made on the worker's device, is the
//     thread's current stream there (StreamGuard) for its whole life, so every kernel and
//     allocation of its stages goes to it (Note [Streams in the pipeline], transport.h). On
//     CPU the stream is a no-op token; on a GPU, workers sharing it run concurrently;
//   - pops jobs from a Channel and runs them in order until the channel is closed.
// The runtime's jobs catch everything and hand the first exception to the caller (see
// step.h); a job that lets one escape anyway does not end the process: the worker keeps the
// first such exception (escaped()) and goes on with the next job. ~Worker closes the channel
// and joins; since jobs only block on the step's Transport, which is cancelled on failure,
// joining cannot deadlock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/channel.h"
#include "pipeline/worker_cpus.h"
#include "tensor/generator.h"
#include "tensor/stream.h"

namespace pipewright::pipeline {

class Worker {
 public:
  using Job = std::function<void()>;

  /// Starts the thread. `intra_op_threads` >= 1; `seed` seeds the worker's Generator;
  /// `device` is where its stages run (its compute stream is created there: a CUDA device
  /// without a usable GPU throws the backend's error, e.g. CudaError). `cpus`: the CPUs the
  /// thread is pinned to before its first job (pin_current_thread, tensor/threads.h; a
  /// refused mask leaves the inherited one); empty: the inherited mask.
  Worker(int index, int intra_op_threads, uint64_t seed, Device device = Device::cpu(0),
         std::vector<int> cpus = {});
  /// Runs the queued jobs, then joins the thread.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// Queues `job`. Jobs run in submission order on this worker's thread. A job should catch
  /// its own exceptions; one that escapes is kept (escaped()), not lost.
  void submit(Job job);

  /// The first exception a job let escape, or nullptr when none has. Any thread.
  std::exception_ptr escaped() const;

  int index() const { return index_; }
  int intra_op_threads() const { return intra_op_threads_; }
  /// The CPUs the thread was asked to run on (empty: inherited).
  const std::vector<int>& cpus() const { return cpus_; }
  Device device() const { return compute_stream_.device(); }
  /// The stream the worker's jobs run on (the thread's current stream of device()).
  const Stream& compute_stream() const { return compute_stream_; }
  /// The worker thread's current generator. Touch it only while no job is running.
  Generator& generator() { return generator_; }

 private:
  void loop();

  int index_;
  int intra_op_threads_;
  std::vector<int> cpus_;
  Generator generator_;
  Stream compute_stream_;
  Channel<Job> jobs_;
  mutable std::mutex escaped_mutex_;
  std::exception_ptr escaped_;  // guarded by escaped_mutex_
  std::thread thread_;  // last: starts after the members above exist
};

/// Counts down finished jobs; the caller waits for zero (a std::latch that TSan can see
/// through: a mutex and a condition variable). A job that ends with an exception it could
/// not hand on passes it to done(); the first one is kept for the waiter (error()).
class Countdown {
 public:
  explicit Countdown(int count) : count_(count) {}
  void done(std::exception_ptr error = nullptr);
  void wait();
  /// The first exception passed to done(), or nullptr.
  std::exception_ptr error();

 private:
  std::mutex mutex_;
  std::condition_variable zero_;
  int count_;
  std::exception_ptr error_;  // guarded by mutex_
};

/// Each worker's device: the device of its stages (stage s on stage_devices[s], run by worker
/// stage_worker[s]). Throws std::invalid_argument naming the values when the two lists differ
/// in length, a stage names no worker in [0, num_workers), or one worker's stages are on
/// different devices (one device per worker).
std::vector<Device> worker_devices(const std::vector<Device>& stage_devices,
                                   const std::vector<int>& stage_worker, int num_workers);

/// One device per worker, each named once: throws std::invalid_argument starting with
/// `caller` when `devices` is empty or names a device twice (naming it).
void check_one_device_per_worker(const std::string& caller, const std::vector<Device>& devices);

/// SplitMix64: distinct, well-mixed seeds for the workers from one user seed.
uint64_t mix_seed(uint64_t seed, uint64_t index);

}  // namespace pipewright::pipeline
