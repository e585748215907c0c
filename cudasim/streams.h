// Streams, events and the sticky error of a simulated device.
//
// A Stream is an ordered queue of operations run by its own worker thread, asynchronously to
// the host that issued them. An operation may carry dependencies (stream, sequence number) it
// waits for before it runs: how event waits and the legacy stream's barrier are executed.
// Ordering *bookkeeping* (vector clocks, who waits for what) happens at enqueue time under the
// runtime's lock (context.h); this file only executes.
//
//   host thread ──enqueue──▶ [op3 op2 op1] ──▶ worker: wait deps ─ chaos delay ─ run/skip
//                                                 completed = seq, notify waiters
//
// Sequence numbers start at 1; completed() == n means ops 1..n have finished (run or skipped).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "cudasim/race.h"

namespace cudasim::detail {

/// A device's sticky error: once set, every later op of the device is skipped and every
/// runtime call touching the device returns it. The first error wins until clear().
class Sticky {
 public:
  void set(cudaError_t error, const std::string& detail);
  /// The error (cudaSuccess when none); *detail receives its text when non-null.
  cudaError_t get(std::string* detail = nullptr) const;
  void clear();

 private:
  std::atomic<int> code_{0};
  mutable std::mutex mu_;
  std::string detail_;
};

/// Thrown by an operation's work to make the device sticky with a specific error.
struct DeviceFault {
  cudaError_t error;
  std::string detail;
};

class Stream;
struct Capture;  // context.h

struct Dep {
  std::shared_ptr<Stream> stream;
  uint64_t seq;
};

struct Op {
  uint64_t seq = 0;
  std::vector<Dep> deps;
  std::function<void()> work;  // empty: nothing to run (event record bookkeeping, waits)
  std::string what;            // for the sticky error's text
};

class Stream {
 public:
  /// Starts the worker thread. chaos_seed != 0: sleep 0-2 ms (seeded) before each op.
  Stream(int id, int device, bool legacy, bool blocking, Sticky* sticky, uint64_t chaos_seed);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  const int id;         // dense id: this stream's vector clock component
  const int device;
  const bool legacy;    // the device's legacy default stream
  const bool blocking;  // created with cudaStreamDefault (synchronises with the legacy stream)

  // Enqueue-side bookkeeping, guarded by the runtime's lock (not by this object).
  VectorClock vc;
  uint64_t enqueued = 0;
  std::shared_ptr<Capture> capture;  // the capture this stream's work goes into, if any

  /// Queues op (op.seq must be enqueued's new value).
  void push(Op op);
  /// Blocks until ops 1..seq have finished.
  void wait_for(uint64_t seq);
  bool done(uint64_t seq);
  /// Lets the queue drain, stops and joins the worker (cudaStreamDestroy). Idempotent.
  void stop_and_join();

 private:
  void run();

  Sticky* sticky_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Op> queue_;
  // The op the worker runs, touched by the worker thread only. A member, not a local of run():
  // while a kernel's CUDA threads run on fibers, LeakSanitizer scans the current fiber's stack
  // and not the worker's own, so what an op on that stack owned (its `what`) was reported as
  // leaked when the process exited with a kernel still running.
  Op running_;
  uint64_t completed_ = 0;
  bool stop_ = false;
  uint64_t chaos_seed_;
  std::mt19937_64 chaos_;
  std::thread thread_;  // last: starts after everything above is constructed
};

/// One cudaEventRecord: which op it waits for and the stream's clock at that point.
struct EventRecord {
  std::shared_ptr<Stream> stream;
  uint64_t seq = 0;
  VectorClock vc;
  std::atomic<int64_t> time_ns{0};  // steady_clock time when the op ran (timing events)
  // A record made while its stream was capturing: a point in that capture, not in a stream
  // (stream and seq stay unset). seen: what a stream waiting for it comes to depend on (its
  // stream's Capture::known, and that stream up to the capture's op count at the record).
  std::shared_ptr<Capture> capture;
  std::map<const Stream*, size_t> seen;
};

struct Event {
  int device = 0;
  unsigned flags = 0;
  std::shared_ptr<EventRecord> last;  // nullptr: never recorded; guarded by the runtime lock
};

}  // namespace cudasim::detail
