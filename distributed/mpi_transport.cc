#include "distributed/mpi_transport.h"

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

#include "distributed/wire_format.h"

namespace pipewright::distributed {

int receiving_stage(const pipeline::MessageKey& key) {
  return key.receiver();
}

MpiTransport::MpiTransport(std::shared_ptr<MpiLink> link, int64_t step,
                           std::vector<int> stage_worker)
    : link_(std::move(link)), step_(step), stage_worker_(std::move(stage_worker)) {}

std::vector<int64_t> MpiTransport::id(const pipeline::MessageKey& key) const {
  std::vector<int64_t> id = {step_};
  for (int64_t w : encode_key(key)) id.push_back(w);
  return id;
}

void MpiTransport::send(const pipeline::MessageKey& key, nn::Tensors tensors,
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

nn::Tensors MpiTransport::recv(const pipeline::MessageKey& key, pipeline::RecvTiming& timing) {
  const auto called = std::chrono::steady_clock::now();
  auto message =
      link_->take(id(key), &cancelled_, key.str() + " of step " + std::to_string(step_));
  timing.arrived = std::chrono::steady_clock::now() - called;
  return unpack_message(message);
}

void MpiTransport::cancel() {
  cancelled_.store(true);
  link_->wake();
}

}  // namespace pipewright::distributed
