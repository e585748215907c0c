// run_parts and the per-thread helper pools (Note [Waiting without burning a core],
// parallel.h).
//
//   caller:  publish job ─ take parts ─────────────┐ all done? wait (spin, then sleep)
//   helper:  (spin, then sleep) ─ wake ─ take parts ┘ last part done: wake the caller
//
// A job lives in a shared_ptr: a helper that wakes late holds the job it saw, whose part
// counter is already past the end, so it runs nothing of it and never touches the next job.
#include "tensor/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "tensor/threads.h"

namespace pipewright {
namespace {

constexpr int64_t kDefaultSpinMicroseconds = 200;
// The most a waiting thread spins while its core is shared with other work.
constexpr int64_t kSharedSpinMicroseconds = 50;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

int64_t read_spin_microseconds() {
  const char* text = std::getenv("PIPEWRIGHT_SPIN_US");
  if (text == nullptr || *text == '\0') return kDefaultSpinMicroseconds;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  return end != text && value >= 0 ? value : kDefaultSpinMicroseconds;
}

/// Spins until ready() or `spin` has passed; returns ready()'s last value.
template <class F>
bool spin_until(const F& ready, std::chrono::nanoseconds spin) {
  if (ready()) return true;
  if (spin.count() == 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + spin;
  for (int i = 1;; ++i) {
    cpu_relax();
    if (ready()) return true;
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= deadline) return false;
  }
}

// Set while a thread runs parts: a run_parts inside a part runs its parts on that thread
// alone (the threads of the outer call are already busy), as a nested OpenMP region would.
thread_local bool tls_in_parts = false;

struct Job {
  const std::function<void(int64_t)>* part = nullptr;
  int64_t parts = 0;
  int helpers = 0;  // helpers 0 .. helpers - 1 take part
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
};

class HelperPool {
 public:
  HelperPool() = default;
  HelperPool(const HelperPool&) = delete;
  HelperPool& operator=(const HelperPool&) = delete;

  ~HelperPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    work_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  int size() const { return static_cast<int>(threads_.size()); }

  void run(int64_t parts, int helpers, const std::function<void(int64_t)>& part) {
    while (size() < helpers) {
      // A new helper starts from the generation before this job's, so it takes this job too.
      const int index = size();
      const uint64_t seen = generation_.load(std::memory_order_acquire);
      threads_.emplace_back([this, index, seen] { helper_loop(index, seen); });
      // Named here, not in the new thread, so the name is set when run() returns (tests and
      // profilers find the helpers by it at once).
      pthread_setname_np(threads_.back().native_handle(), kHelperThreadName);
    }
    auto job = std::make_shared<Job>();
    job->part = &part;
    job->parts = parts;
    job->helpers = helpers;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      current_ = job;
      generation_.fetch_add(1, std::memory_order_release);
    }
    work_.notify_all();
    take_parts(*job);
    const auto finished = [&] { return job->done.load(std::memory_order_acquire) == parts; };
    if (!spin_until(finished, spin_for(caller_core_))) {
      std::unique_lock<std::mutex> lock(mutex_);
      finished_.wait(lock, finished);
    }
  }

 private:
  void take_parts(Job& job) {
    for (int64_t p; (p = job.next.fetch_add(1, std::memory_order_relaxed)) < job.parts;) {
      (*job.part)(p);
      if (job.done.fetch_add(1, std::memory_order_acq_rel) + 1 == job.parts) {
        std::lock_guard<std::mutex> lock(mutex_);  // the caller checks under this lock
        finished_.notify_one();
      }
    }
  }

  void helper_loop(int index, uint64_t seen) {
    tls_in_parts = true;  // a helper runs nothing but parts
    SharedCoreWatch core;
    for (;;) {
      const auto published = [&] { return generation_.load(std::memory_order_acquire) != seen; };
      std::shared_ptr<Job> job;
      if (!spin_until(published, spin_for(core))) {
        std::unique_lock<std::mutex> lock(mutex_);
        work_.wait(lock, published);
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) return;
        seen = generation_.load(std::memory_order_acquire);
        job = current_;
      }
      if (job != nullptr && index < job->helpers) take_parts(*job);
    }
  }

  // How long a waiting thread spins: spin_microseconds() on a core of its own, at most
  // kSharedSpinMicroseconds on one shared with other work.
  static std::chrono::nanoseconds spin_for(SharedCoreWatch& core) {
    const int64_t spin = spin_microseconds();
    return std::chrono::microseconds(core.update() ? std::min(spin, kSharedSpinMicroseconds)
                                                   : spin);
  }

  SharedCoreWatch caller_core_;  // the calling thread's (the pool is its thread_local)
  std::mutex mutex_;
  std::condition_variable work_;      // helpers: a new job (or stopping)
  std::condition_variable finished_;  // the caller: the job's last part is done
  std::atomic<uint64_t> generation_{0};
  std::shared_ptr<Job> current_;      // guarded by mutex_
  bool stopping_ = false;             // guarded by mutex_
  std::vector<std::thread> threads_;  // the calling thread's alone
};

HelperPool& this_threads_pool() {
  thread_local HelperPool pool;
  return pool;
}

}  // namespace

int64_t spin_microseconds() {
  static const int64_t spin = read_spin_microseconds();
  return spin;
}

int helper_threads() { return this_threads_pool().size(); }

void run_parts(int64_t parts, const std::function<void(int64_t part)>& part) {
  if (parts <= 0) return;
  const int helpers = static_cast<int>(std::min<int64_t>(parts, intra_op_threads())) - 1;
  if (helpers <= 0 || tls_in_parts) {
    for (int64_t p = 0; p < parts; ++p) part(p);
    return;
  }
  struct InParts {
    InParts() { tls_in_parts = true; }
    ~InParts() { tls_in_parts = false; }
  } in_parts;
  this_threads_pool().run(parts, helpers, part);
}

}  // namespace pipewright
