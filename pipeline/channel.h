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
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

namespace pipewright::pipeline {

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
    }
    ready_.notify_one();
    return true;
  }

  /// The oldest value, blocking until one arrives; nullopt once closed and drained.
  std::optional<T> pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [this] { return !queue_.empty() || closed_; });
    if (queue_.empty()) return std::nullopt;
    T value = std::move(queue_.front());
    queue_.pop_front();
    return value;
  }

  /// Wakes every waiter; later push() calls are refused. Idempotent.
  void close() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    ready_.notify_all();
  }

  /// Drops queued values (their destructors run outside the lock).
  void clear() {
    std::deque<T> dropped;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      dropped.swap(queue_);
    }
  }

  bool closed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return closed_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<T> queue_;
  bool closed_ = false;
};

}  // namespace pipewright::pipeline
