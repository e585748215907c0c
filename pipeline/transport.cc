// InProcessTransport: queues per message key; copies on copy streams with events, exactly as
// Note [Streams in the pipeline] (transport.h) draws it.
#include "pipeline/transport.h"

#include <algorithm>

namespace pipewright::pipeline {

std::string MessageKey::str() const {
  const std::string where = " edge " + std::to_string(arrival_edge) +
                            (skip >= 0 ? " of skip " + std::to_string(skip) : std::string());
  return std::string(direction == Direction::kActivation ? "activation" : "gradient") + where +
         " micro-batch " + std::to_string(microbatch);
}

std::shared_ptr<InProcessTransport::Queue> InProcessTransport::queue(const MessageKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = queues_[key];
  if (slot == nullptr) {
    slot = std::make_shared<Queue>();
    if (cancelled_) slot->close();
  }
  return slot;
}

Stream InProcessTransport::copy_stream(Device device, Direction direction) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = copy_streams_.find({device, direction});
  if (it == copy_streams_.end()) {
    it = copy_streams_.emplace(std::pair{device, direction}, Stream::create(device)).first;
  }
  return it->second;
}

namespace {

/// One event per device: the point the sender's current stream of that device has reached.
struct Recorded {
  Device device;
  Event event;
};

Event& recorded_on_current(std::vector<Recorded>& events, Device device) {
  for (Recorded& r : events) {
    if (r.device == device) return r.event;
  }
  events.push_back({device, Event(device)});
  events.back().event.record(Stream::current(device));  // step 1
  return events.back().event;
}

}  // namespace

void InProcessTransport::send(const MessageKey& key, nn::Tensors tensors,
                              Device destination) {
  // What the copies read must be contiguous, made so on the producer's stream before step 1.
  for (Tensor& t : tensors) {
    if (t.defined() && t.device() != destination) t = t.contiguous();
  }
  std::vector<Recorded> produced;  // step 1, per source device
  std::vector<Stream> used;        // copy streams that carry this message
  // Note [One wait per copy stream and source]: step 2 is owed once per (copy stream, source
  // device) pair, not once per copy stream. Tensors of one message may come from several
  // devices whose copies share a stream (cpu:0 and cuda:0 both into cuda:1 use cuda:1's
  // stream); each source has its own `ready` event, and a copy stream that waited for the
  // first source's only must still wait for the second's before copying from it.
  std::vector<std::pair<Stream, Device>> waited;
  Message message{{}, destination, {}, {}};
  for (Tensor& x : tensors) {
    if (!x.defined()) continue;
    const Device source = x.device();
    Event& ready = recorded_on_current(produced, source);
    if (source == destination) continue;  // no copy: the receiver waits for `ready` itself
    const Stream stream = copy_stream(copy_stream_device(source, destination), key.direction);
    auto same_stream = [&](const Stream& s) {
      return s.handle() == stream.handle() && s.device() == stream.device();
    };
    if (std::none_of(waited.begin(), waited.end(), [&](const auto& w) {
          return same_stream(w.first) && w.second == source;
        })) {
      ready.wait(stream);  // step 2
      waited.emplace_back(stream, source);
    }
    if (std::none_of(used.begin(), used.end(), same_stream)) used.push_back(stream);
    Tensor y;
    {
      StreamGuard on_copy_stream(stream);  // y's block belongs to the copy stream (step 3)
      y = Tensor::empty(x.shape(), {x.dtype(), destination});
    }
    copy_on_stream(y.raw_data(), destination, x.raw_data(), source, x.nbytes(), stream);
    record_stream(x, stream);
    x = std::move(y);
  }
  for (const Stream& stream : used) {  // step 4
    message.ready.emplace_back(stream.device());
    message.ready.back().record(stream);
  }
  for (Recorded& r : produced) {
    if (r.device == destination) message.ready.push_back(std::move(r.event));
  }
  message.tensors = std::move(tensors);
  message.sent = std::chrono::steady_clock::now();
  queue(key)->push(std::move(message));
}

nn::Tensors InProcessTransport::recv(const MessageKey& key, RecvTiming& timing) {
  const auto called = std::chrono::steady_clock::now();
  std::shared_ptr<Queue> q = queue(key);
  std::optional<Message> message = q->pop(timing.expected, timing.lead);
  if (!message) throw RunCancelled();
  timing.arrived = message->sent - called;
  // Each message is received once: forget the queue so the map does not grow with the run.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queues_.erase(key);
  }
  const Stream consumer = Stream::current(message->destination);
  for (const Event& e : message->ready) e.wait(consumer);               // step 5
  for (const Tensor& t : message->tensors) record_stream(t, consumer);  // step 6
  return std::move(message->tensors);
}

void InProcessTransport::cancel() {
  std::map<MessageKey, std::shared_ptr<Queue>> queues;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_ = true;
    queues.swap(queues_);
  }
  // Close first (wakes the waiters), then drop queued tensors outside our lock.
  for (auto& [key, q] : queues) {
    q->close();
    q->clear();
  }
}

}  // namespace pipewright::pipeline
