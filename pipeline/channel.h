// Channel<T>: an unbounded, closable, blocking FIFO between threads.
//
// The pipeline's only synchronisation primitive besides the completion latch: a worker's job
// queue is a Channel<Job>, and the in-process Transport keeps one Channel<Message> per
// (stage edge, micro-batch, direction). push() never blocks; pop() blocks until a value
// arrives or the channel is closed.
//
//   producer                      consumer
//   push(a) ──► [ a ] ──────────► pop() -> a
//   push(b) ──► [ b ]
//   close() ──► [ b | closed ] ─► pop() -> b      (values pushed before close are delivered)
//                                 pop() -> nullopt (closed and empty: never blocks again)
//
// Closing is how a failed pipeline run cancels every wait: Transport::cancel() closes all its
// channels, so a worker blocked on an activation that will never come wakes up with nullopt
// instead of hanging (torchgpipe's hang-at-exit complaint).
//
// Note [Waiting for a message due soon]
// A pipeline worker waits for most of its messages: an activation while the stage to its left
// computes a forward, a gradient while the one to its right computes a backward. pop() sleeps
// on the condition variable, and on a machine whose idle cores are halted (a virtual
// machine's host stops polling an idle vCPU after some 100 us) waking the sleeper is slow at
// both ends: measured on this project's 2-vCPU VM, the sender's push() took 31 us instead of
// 6 (the wake-up it sends to the halted core) and the receiver ran 70-80 us after the push
// instead of 10 (docs/BENCHMARKS.md, "Waiting for a message due soon"). A step repeats the
// same schedule, so a worker knows roughly when each message comes: it came this long after
// the worker started waiting for it in the last step. pop(expected, lead) uses that:
//
//   now ──── sleep ────┬──── spin ────┬──── sleep ──►
//                      due - lead     due + lead
//
// It sleeps until `lead` before the value is due (a timed wait: the core wakes on its own
// timer, with the lead to spare), spins until `lead` after it, then sleeps until the value
// comes. A value that arrives on time finds the receiver spinning: no wake-up at either end.
// One that comes early wakes the sleeper as pop() would; one that comes late costs at most
// 2 x lead of spinning. The spin reads an atomic flag, never the lock, so the sender's push()
// is not slowed by it, and yields the core at every turn, so a thread that shares the core
// (the sender itself, when the scheduler put both there) runs instead.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace pipewright::pipeline {

/// The margin a pipeline worker wakes before a message is due and spins after it (Note
/// [Waiting for a message due soon]): longer than a halted core takes to run its timer's
/// wake-up (70-80 us on this project's VM), short enough that a mistimed wait burns little.
inline constexpr std::chrono::microseconds kDueLead{150};

template <class T>
class Channel {
 public:
  Channel() = default;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  /// Appends `value`. Returns false (dropping the value) when the channel is closed.
  bool push(T value) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (closed_) return false;
      queue_.push_back(std::move(value));
      ready_flag_.store(true, std::memory_order_release);
    }
    ready_.notify_one();
    return true;
  }

  /// The oldest value, blocking until one arrives; nullopt once closed and drained.
  std::optional<T> pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [this] { return ready(); });
    return take();
  }

  /// pop() for a value expected `expected` from now: sleeps until `lead` before it is due,
  /// spins until `lead` after, then sleeps until it comes (Note [Waiting for a message due
  /// soon]). expected < 0 or lead <= 0: pop(). Same results as pop().
  std::optional<T> pop(std::chrono::steady_clock::duration expected,
                       std::chrono::steady_clock::duration lead) {
    using Clock = std::chrono::steady_clock;
    if (expected.count() < 0 || lead.count() <= 0) return pop();
    const Clock::time_point due = Clock::now() + expected;
    std::unique_lock<std::mutex> lock(mutex_);
    if (!ready()) ready_.wait_until(lock, due - lead, [this] { return ready(); });
    if (!ready()) {
      lock.unlock();
      const Clock::time_point spin_end = due + lead;
      for (int i = 1; !ready_flag_.load(std::memory_order_acquire); ++i) {
        std::this_thread::yield();
        if (i % 64 == 0 && Clock::now() >= spin_end) break;
      }
      lock.lock();
      ready_.wait(lock, [this] { return ready(); });
    }
    return take();
  }

  /// Wakes every waiter; later push() calls are refused. Idempotent.
  void close() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
      ready_flag_.store(true, std::memory_order_release);
    }
    ready_.notify_all();
  }

  /// Drops queued values (their destructors run outside the lock).
  void clear() {
    std::deque<T> dropped;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      dropped.swap(queue_);
      ready_flag_.store(closed_, std::memory_order_release);
    }
  }

  bool closed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return closed_;
  }

 private:
  bool ready() const { return !queue_.empty() || closed_; }  // under mutex_

  // Under mutex_, once ready(): the front value, or nullopt when closed and drained.
  std::optional<T> take() {
    if (queue_.empty()) return std::nullopt;
    T value = std::move(queue_.front());
    queue_.pop_front();
    ready_flag_.store(ready(), std::memory_order_release);
    return value;
  }

  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<T> queue_;
  bool closed_ = false;
  // ready() as of the last change under mutex_, for pop(expected, lead)'s spin.
  std::atomic<bool> ready_flag_{false};
};

}  // namespace pipewright::pipeline
