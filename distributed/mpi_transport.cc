#include "distributed/mpi_transport.h"

#include <chrono>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include "distributed/mpi.h"

namespace pipewright::distributed {
namespace {

constexpr int64_t kMagic = 0x5057'4d53'4731;  // "PWMSG1"
constexpr int kMessageTag = 1;
constexpr int kFailureTag = 2;

using Clock = std::chrono::steady_clock;

Clock::duration as_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Reads int64 words from the front of a packed message, checking every bound.
class Reader {
 public:
  explicit Reader(const std::vector<char>& bytes) : bytes_(bytes) {}
  int64_t next() {
    if (pos_ + sizeof(int64_t) > bytes_.size()) {
      throw std::runtime_error("MpiTransport: malformed message (header truncated at byte " +
                               std::to_string(pos_) + " of " + std::to_string(bytes_.size()) + ")");
    }
    int64_t word;
    std::memcpy(&word, bytes_.data() + pos_, sizeof word);
    pos_ += sizeof word;
    return word;
  }
  size_t pos() const { return pos_; }

 private:
  const std::vector<char>& bytes_;
  size_t pos_ = 0;
};

int64_t checked_word(Reader& r, int64_t low, int64_t high, const char* what) {
  const int64_t v = r.next();
  if (v < low || v > high) {
    throw std::runtime_error(std::string("MpiTransport: malformed message (") + what + " " +
                             std::to_string(v) + " outside [" + std::to_string(low) + ", " +
                             std::to_string(high) + "])");
  }
  return v;
}

}  // namespace

std::vector<int64_t> encode_key(const pipeline::MessageKey& key) {
  return {key.arrival_edge, key.microbatch, static_cast<int64_t>(key.direction), key.skip};
}

int receiving_stage(const pipeline::MessageKey& key) {
  return key.receiver();
}

// ---- packing ----

std::vector<char> pack_message(const std::vector<int64_t>& id, const std::vector<Tensor>& tensors,
                               Device destination) {
  std::vector<int64_t> header = {kMagic, id.at(0), static_cast<int64_t>(id.size() - 1)};
  header.insert(header.end(), id.begin() + 1, id.end());
  header.push_back(static_cast<int64_t>(destination.type));
  header.push_back(destination.index);
  header.push_back(static_cast<int64_t>(tensors.size()));
  std::vector<Tensor> host;  // contiguous host copies of the defined tensors
  size_t payload = 0;
  for (const Tensor& t : tensors) {
    header.push_back(t.defined() ? 1 : 0);
    if (!t.defined()) continue;
    header.push_back(static_cast<int64_t>(t.dtype()));
    header.push_back(t.dim());
    for (int64_t d : t.shape().dims()) header.push_back(d);
    // Host memory is read directly (any virtual CPU device); a GPU tensor is copied to the
    // host on the calling thread's current stream first (Note [The wire format]).
    host.push_back(t.device().is_cpu() ? t.contiguous() : t.contiguous().to(Device::cpu(0)));
    payload += host.back().nbytes();
  }
  std::vector<char> bytes(header.size() * sizeof(int64_t) + payload);
  std::memcpy(bytes.data(), header.data(), header.size() * sizeof(int64_t));
  char* out = bytes.data() + header.size() * sizeof(int64_t);
  for (const Tensor& t : host) {
    std::memcpy(out, t.raw_data(), t.nbytes());
    out += t.nbytes();
  }
  return bytes;
}

std::vector<int64_t> message_id(const std::vector<char>& bytes) {
  Reader r(bytes);
  if (r.next() != kMagic) throw std::runtime_error("MpiTransport: malformed message (magic)");
  std::vector<int64_t> id = {r.next()};
  const int64_t k = checked_word(r, 0, 64, "key length");
  for (int64_t i = 0; i < k; ++i) id.push_back(r.next());
  return id;
}

std::vector<Tensor> unpack_message(const std::vector<char>& bytes) {
  Reader r(bytes);
  if (r.next() != kMagic) throw std::runtime_error("MpiTransport: malformed message (magic)");
  r.next();  // step
  const int64_t k = checked_word(r, 0, 64, "key length");
  for (int64_t i = 0; i < k; ++i) r.next();
  Device destination;
  destination.type = static_cast<DeviceType>(checked_word(r, 0, 1, "device type"));
  destination.index = static_cast<int>(checked_word(r, 0, 1 << 20, "device index"));
  const int64_t count = checked_word(r, 0, 1 << 20, "tensor count");
  struct Entry {
    bool defined;
    DType dtype;
    Shape shape;
  };
  std::vector<Entry> entries;
  size_t payload = 0;
  for (int64_t i = 0; i < count; ++i) {
    Entry e{checked_word(r, 0, 1, "defined flag") != 0, DType::kFloat32, Shape()};
    if (e.defined) {
      e.dtype = static_cast<DType>(checked_word(r, 0, 2, "dtype"));
      const int64_t rank = checked_word(r, 0, 64, "rank");
      std::vector<int64_t> dims;
      for (int64_t d = 0; d < rank; ++d)
        dims.push_back(checked_word(r, 0, int64_t{1} << 40, "dim"));
      e.shape = Shape(std::move(dims));
      payload += static_cast<size_t>(e.shape.numel()) * element_size(e.dtype);
    }
    entries.push_back(std::move(e));
  }
  if (r.pos() + payload != bytes.size()) {
    throw std::runtime_error("MpiTransport: malformed message (" + std::to_string(bytes.size()) +
                             " bytes, header says " + std::to_string(r.pos() + payload) + ")");
  }
  const char* in = bytes.data() + r.pos();
  std::vector<Tensor> tensors;
  for (const Entry& e : entries) {
    if (!e.defined) {
      tensors.emplace_back();
      continue;
    }
    const Device host = destination.is_cpu() ? destination : Device::cpu(0);
    Tensor t = Tensor::empty(e.shape, {e.dtype, host});
    std::memcpy(t.raw_data(), in, t.nbytes());
    in += t.nbytes();
    tensors.push_back(host == destination ? std::move(t) : t.to(destination));
  }
  return tensors;
}

// ---- MpiLink ----

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

// ---- MpiTransport ----

MpiTransport::MpiTransport(std::shared_ptr<MpiLink> link, int64_t step,
                           std::vector<int> stage_worker)
    : link_(std::move(link)), step_(step), stage_worker_(std::move(stage_worker)) {}

std::vector<int64_t> MpiTransport::id(const pipeline::MessageKey& key) const {
  std::vector<int64_t> id = {step_};
  for (int64_t w : encode_key(key)) id.push_back(w);
  return id;
}

void MpiTransport::send(const pipeline::MessageKey& key, std::vector<Tensor> tensors,
                        Device destination) {
  if (cancelled_.load()) return;
  const int stage = receiving_stage(key);
  if (stage < 0 || stage >= static_cast<int>(stage_worker_.size())) {
    throw std::invalid_argument("MpiTransport: " + key.str() + " goes to stage " +
                                std::to_string(stage) + " of " +
                                std::to_string(stage_worker_.size()));
  }
  link_->post(stage_worker_[static_cast<size_t>(stage)],
              pack_message(id(key), tensors, destination));
}

std::vector<Tensor> MpiTransport::recv(const pipeline::MessageKey& key) {
  return unpack_message(
      link_->take(id(key), &cancelled_, key.str() + " of step " + std::to_string(step_)));
}

void MpiTransport::cancel() {
  cancelled_.store(true);
  link_->wake();
}

}  // namespace pipewright::distributed
