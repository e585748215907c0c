#include "distributed/mpi_link.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <utility>

#include "distributed/mpi.h"
#include "distributed/wire_format.h"
#include "pipeline/transport.h"

namespace pipewright::distributed {
namespace {

constexpr int kMessageTag = 1;
constexpr int kFailureTag = 2;

using Clock = std::chrono::steady_clock;

Clock::duration as_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

MpiLink::MpiLink(MPI_Comm pipeline, MPI_Comm control, std::string name) : name_(std::move(name)) {
  check(MPI_Comm_dup(pipeline, &comm_), "MPI_Comm_dup (pipeline)");
  check(MPI_Comm_dup(control, &control_), "MPI_Comm_dup (control)");
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  check(MPI_Comm_rank(control_, &control_rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(control_, &control_size_), "MPI_Comm_size");
  thread_ = std::thread([this] { loop(); });
}

MpiLink::~MpiLink() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
  // Requests still in flight after a failure are released unfinished; their buffers are
  // leaked on purpose (MPI may still read them).
  for (InFlight& f : in_flight_) {
    MPI_Request_free(&f.request);
    new std::vector<char>(std::move(f.bytes));
  }
  MPI_Comm_free(&comm_);
  MPI_Comm_free(&control_);
}

void MpiLink::post(int destination, std::vector<char> bytes) {
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    throw std::invalid_argument(name_ + ": a message of " + std::to_string(bytes.size()) +
                                " bytes exceeds MPI's int count (2^31 - 1)");
  }
  if (destination == rank_) {
    file(std::move(bytes));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    outbox_.push_back({destination, kMessageTag, false, std::move(bytes)});
  }
  changed_.notify_all();
}

void MpiLink::file(std::vector<char> bytes) {
  std::vector<int64_t> id = message_id(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    inbox_[std::move(id)].push_back(std::move(bytes));
  }
  changed_.notify_all();
}

std::vector<char> MpiLink::take(const std::vector<int64_t>& id, const std::atomic<bool>* cancelled,
                                const std::string& what) {
  const auto deadline = Clock::now() + as_duration(timeout_seconds());
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (cancelled != nullptr && cancelled->load()) throw pipeline::RunCancelled();
    auto it = inbox_.find(id);
    if (it != inbox_.end() && !it->second.empty()) {
      std::vector<char> bytes = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) inbox_.erase(it);
      return bytes;
    }
    if (remote_failure_) throw RemoteFailure(*remote_failure_);
    if (thread_error_) throw MpiError(name_ + ": communication thread: " + *thread_error_);
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout &&
        Clock::now() >= deadline) {
      throw MpiTimeout("waited " + std::to_string(timeout_seconds()) + " s for the " + what +
                       " (PIPEWRIGHT_MPI_TIMEOUT)");
    }
  }
}

void MpiLink::wake() { changed_.notify_all(); }

void MpiLink::drop_before(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = inbox_.begin(); it != inbox_.end();) {
    it = it->first.at(0) < step ? inbox_.erase(it) : std::next(it);
  }
}

void MpiLink::notify_failure(const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (notified_ || remote_failure_) return;  // a remote failure is not ours to repeat
    notified_ = true;
    for (int r = 0; r < control_size_; ++r) {
      if (r == control_rank_) continue;
      outbox_.push_back({r, kFailureTag, true, std::vector<char>(text.begin(), text.end())});
    }
  }
  changed_.notify_all();
}

void MpiLink::check_failures() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (remote_failure_) throw RemoteFailure(*remote_failure_);
  if (thread_error_) throw MpiError(name_ + ": communication thread: " + *thread_error_);
}

bool MpiLink::poll_once() {
  bool active = false;
  std::deque<Outgoing> outgoing;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    outgoing.swap(outbox_);
  }
  for (Outgoing& o : outgoing) {
    InFlight f{MPI_REQUEST_NULL, std::move(o.bytes)};
    check(MPI_Isend(f.bytes.data(), static_cast<int>(f.bytes.size()), MPI_BYTE, o.destination,
                    o.tag, o.control ? control_ : comm_, &f.request),
          "MPI_Isend");
    if (!o.control) {
      bytes_sent_ += static_cast<int64_t>(f.bytes.size());
      ++messages_sent_;
    }
    in_flight_.push_back(std::move(f));
    active = true;
  }
  for (size_t i = 0; i < in_flight_.size();) {
    int done = 0;
    check(MPI_Test(&in_flight_[i].request, &done, MPI_STATUS_IGNORE), "MPI_Test (send)");
    if (done) {
      in_flight_[i] = std::move(in_flight_.back());
      in_flight_.pop_back();
    } else {
      ++i;
    }
  }
  for (;;) {
    int flag = 0;
    MPI_Status status;
    check(MPI_Iprobe(MPI_ANY_SOURCE, kMessageTag, comm_, &flag, &status), "MPI_Iprobe");
    if (!flag) break;
    int count = 0;
    check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
    std::vector<char> bytes(static_cast<size_t>(count));
    check(MPI_Recv(bytes.data(), count, MPI_BYTE, status.MPI_SOURCE, kMessageTag, comm_,
                   MPI_STATUS_IGNORE),
          "MPI_Recv");
    file(std::move(bytes));
    active = true;
  }
  int flag = 0;
  MPI_Status status;
  check(MPI_Iprobe(MPI_ANY_SOURCE, kFailureTag, control_, &flag, &status), "MPI_Iprobe");
  if (flag) {
    int count = 0;
    check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
    std::string text(static_cast<size_t>(count), '\0');
    check(MPI_Recv(text.data(), count, MPI_BYTE, status.MPI_SOURCE, kFailureTag, control_,
                   MPI_STATUS_IGNORE),
          "MPI_Recv");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!remote_failure_) remote_failure_ = std::move(text);
    }
    changed_.notify_all();
    active = true;
  }
  return active;
}

void MpiLink::loop() {
  auto pause = std::chrono::microseconds(20);
  std::optional<Clock::time_point> drain_deadline;
  for (;;) {
    bool active = false;
    try {
      active = poll_once();
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      thread_error_ = e.what();
      changed_.notify_all();
      return;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (stop_) {
      // Drain: the posted sends (failure notices included) must complete before the
      // communicator goes; a receiver that is alive takes them. Give up after the timeout,
      // or after two seconds once a failure is known (a dead peer never takes its message).
      const bool failing = remote_failure_ || notified_;
      if (!drain_deadline) {
        drain_deadline = Clock::now() + as_duration(failing ? 2.0 : timeout_seconds());
      }
      if ((in_flight_.empty() && outbox_.empty()) || Clock::now() > *drain_deadline) return;
    }
    if (active) {
      pause = std::chrono::microseconds(20);
    } else {
      changed_.wait_for(lock, pause, [this] { return !outbox_.empty(); });
      pause = std::min(pause * 2, std::chrono::microseconds(200));
    }
  }
}

}  // namespace pipewright::distributed
