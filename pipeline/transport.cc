#include "pipeline/transport.h"

namespace pipewright::pipeline {

std::string MessageKey::str() const {
  return std::string(direction == Direction::kActivation ? "activation" : "gradient") +
         " edge " + std::to_string(edge) + " micro-batch " + std::to_string(microbatch);
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

void InProcessTransport::send(const MessageKey& key, std::vector<Tensor> tensors,
                              Device destination) {
  for (Tensor& t : tensors) {
    if (t.defined()) t = t.to(destination);
  }
  queue(key)->push(std::move(tensors));
}

std::vector<Tensor> InProcessTransport::recv(const MessageKey& key) {
  std::shared_ptr<Queue> q = queue(key);
  std::optional<std::vector<Tensor>> message = q->pop();
  if (!message) throw RunCancelled();
  // Each message is received once: forget the queue so the map does not grow with the run.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queues_.erase(key);
  }
  return std::move(*message);
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
