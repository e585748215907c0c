// Transport: how activations and gradients cross from one pipeline stage to the next.
//
// A pipeline step exchanges exactly one message per (stage edge, micro-batch, direction):
//
//        stage s                      stage s+1
//   F(s, j) ── activation (edge s, j) ──►  F(s+1, j)
//   B(s, j) ◄── gradient  (edge s, j) ───  B(s+1, j)
//
// The runtime talks only to this interface, never to another worker's memory, so the same
// action interpreter can later run with one process per stage (MPI for CPU, NCCL for GPU).
// A message is a list of tensors (a torchgpipe "tuple"); an undefined entry means "no
// tensor" (e.g. no gradient for an integer output) and travels as such.
//
// The sender names the receiver's device. InProcessTransport copies each tensor there at
// send time (Tensor::to: no copy when the devices are equal, so stages sharing a device share
// the activation's storage) and keeps a Channel per key, created by whichever side gets there
// first. Copying at the sender means a message never pins the sender's memory: a
// checkpointed cell's output is freed the moment it is sent (Note [Where the copy happens]
// in docs/pipeline.md explains what this does to each device's memory counters).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "pipeline/channel.h"
#include "tensor/tensor.h"

namespace pipewright::pipeline {

enum class Direction : uint8_t { kActivation, kGradient };

/// Names one message. `edge` is the boundary between stage `edge` and stage `edge + 1`:
/// activations travel edge -> edge + 1, gradients edge + 1 -> edge.
struct MessageKey {
  int edge = 0;
  int microbatch = 0;
  Direction direction = Direction::kActivation;

  friend bool operator<(const MessageKey& a, const MessageKey& b) {
    return std::tie(a.edge, a.microbatch, a.direction) <
           std::tie(b.edge, b.microbatch, b.direction);
  }
  /// "activation edge 1 micro-batch 3".
  std::string str() const;
};

/// Thrown by recv() after cancel(): the run already failed elsewhere. Workers swallow it (the
/// original exception is what reaches the caller); it never escapes the pipeline.
class RunCancelled : public std::runtime_error {
 public:
  RunCancelled() : std::runtime_error("pipeline run cancelled") {}
};

class Transport {
 public:
  virtual ~Transport() = default;
  /// Hands `tensors` to the receiver of `key`, whose stage lives on `destination`. Does not
  /// wait for the receiver. After cancel() the message is dropped.
  virtual void send(const MessageKey& key, std::vector<Tensor> tensors, Device destination) = 0;
  /// Blocks until the message `key` arrives and returns its tensors (on the destination
  /// device the sender named). Throws RunCancelled once cancel() was called (immediately if
  /// it already was).
  virtual std::vector<Tensor> recv(const MessageKey& key) = 0;
  /// Wakes every blocked recv() (they throw RunCancelled) and drops pending messages.
  /// Idempotent; safe from any thread.
  virtual void cancel() = 0;
};

/// Threads of one process: a blocking queue per key.
class InProcessTransport final : public Transport {
 public:
  InProcessTransport() = default;
  void send(const MessageKey& key, std::vector<Tensor> tensors, Device destination) override;
  std::vector<Tensor> recv(const MessageKey& key) override;
  void cancel() override;

 private:
  using Queue = Channel<std::vector<Tensor>>;
  std::shared_ptr<Queue> queue(const MessageKey& key);

  std::mutex mutex_;
  std::map<MessageKey, std::shared_ptr<Queue>> queues_;
  bool cancelled_ = false;
};

}  // namespace pipewright::pipeline
