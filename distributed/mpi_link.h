// MpiLink: one process's end of a replica's pipeline over MPI, with the thread that makes
// every point-to-point call. MpiTransport (mpi_transport.h) is the Transport of one step on it.
//
// Note [The communication thread]
// One thread per MpiLink makes every point-to-point call: it posts the queued sends
// (MPI_Isend, so a worker never waits for its receiver), completes them, and receives
// whatever arrives (MPI_Iprobe on any source, then MPI_Recv of exactly that message) into
// the inbox, where recv() finds it. Receiving eagerly is what "posting receives ahead"
// means here: a message is taken off the wire while the worker still computes, whichever
// order the schedule asks for them in. When idle, the thread sleeps 20-200 µs between
// polls instead of spinning (ranks often share cores). It also watches the control
// communicator for failure notices (Note [Failure notices], mpi_processes.h).
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace pipewright::distributed {

/// One process's end of a replica's pipeline: the communicators, the communication thread,
/// the inbox. Shared by the MpiTransport of every step of one Pipe.
class MpiLink {
 public:
  /// `pipeline`: a communicator in which rank w runs worker w. `control`: every rank of the
  /// job, for failure notices. Both are duplicated here (freed at destruction). `name`
  /// describes this rank in errors ("rank 1 (replica 0, worker 1)"). Starts the thread.
  MpiLink(MPI_Comm pipeline, MPI_Comm control, std::string name);
  /// Stops the thread after the posted sends complete (waiting at most timeout_seconds(),
  /// or 2 s after a failure).
  ~MpiLink();
  MpiLink(const MpiLink&) = delete;
  MpiLink& operator=(const MpiLink&) = delete;

  /// This process's rank in the pipeline communicator (= its worker).
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  /// Queues `bytes` (a packed message) for worker `destination`; delivered locally when
  /// that is this rank. Never blocks. Throws std::invalid_argument for 2^31 bytes or more.
  void post(int destination, std::vector<char> bytes);
  /// The bytes of the message filed under `id` (step, key words), waiting for it. Throws
  /// pipeline::RunCancelled once *cancelled is set (call wake() after setting it),
  /// RemoteFailure after another rank's failure notice, MpiTimeout naming `what` after
  /// timeout_seconds(), MpiError when the communication thread failed.
  std::vector<char> take(const std::vector<int64_t>& id, const std::atomic<bool>* cancelled,
                         const std::string& what);
  /// Wakes every take() to re-check its cancellation flag.
  void wake();
  /// Forgets inbox entries of steps before `step` (left over by a failed step).
  void drop_before(int64_t step);

  /// Tells every rank of the job (control communicator) that this one failed with `text`.
  /// Never blocks; sent once.
  void notify_failure(const std::string& text);
  /// Throws RemoteFailure when a notice from another rank arrived, MpiError when the
  /// communication thread failed.
  void check_failures() const;

  /// Totals of this link (for benchmarks): bytes and messages handed to MPI_Isend.
  int64_t bytes_sent() const { return bytes_sent_.load(); }
  int64_t messages_sent() const { return messages_sent_.load(); }

 private:
  struct Outgoing {
    int destination;
    int tag;
    bool control;
    std::vector<char> bytes;
  };
  struct InFlight {
    MPI_Request request;
    std::vector<char> bytes;
  };
  void loop();
  bool poll_once();  // one round of the thread's work; true when something happened
  void file(std::vector<char> bytes);

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm control_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int control_rank_ = 0;
  int control_size_ = 1;
  std::string name_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;  // inbox grew, a failure arrived, wake(), outbox grew
  std::deque<Outgoing> outbox_;
  std::map<std::vector<int64_t>, std::deque<std::vector<char>>> inbox_;
  std::optional<std::string> remote_failure_;
  std::optional<std::string> thread_error_;
  bool notified_ = false;
  bool stop_ = false;

  std::vector<InFlight> in_flight_;  // the thread's own
  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<int64_t> messages_sent_{0};
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace pipewright::distributed
