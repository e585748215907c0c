// Transport: how activations and gradients cross from one pipeline stage to the next.
//
// A pipeline step exchanges exactly one message per (stage edge, micro-batch, direction):
//
//        stage s                      stage s+1
//   F(s, j) ── activation (edge s, j) ──►  F(s+1, j)
//   B(s, j) ◄── gradient  (edge s, j) ───  B(s+1, j)
//
// plus one per skip connection's portal (MessageKey::skip), between the stages it joins.
//
// The runtime talks only to this interface, never to another worker's memory, so the same
// action interpreter can later run with one process per stage (MPI for CPU, NCCL for GPU).
// A message is a list of tensors (a torchgpipe "tuple"); an undefined entry means "no
// tensor" (e.g. no gradient for an integer output) and travels as such.
//
// The sender names the receiver's device. InProcessTransport copies each tensor there at
// send time (no copy when the devices are equal, so stages sharing a device share the
// activation's storage) and keeps a Channel per key, created by whichever side gets there
// first.
//
// Note [Where the copy happens]
// Activations and gradients move to the receiver's device at send time, by the sender
// (InProcessTransport::send). A message therefore never pins the sender's memory: a
// checkpointed cell's output is freed the moment it is sent. The price is that the
// receiver's device sees the allocation when the sender sends, on the sender's thread. For
// activations this changes nothing at the peaks (a stage keeps every input until its
// backward, and all inputs have arrived by its last forward). Gradients arriving early from
// a fast right neighbour do add to a middle stage's backward-phase memory, depending on
// timing — which is why pipe_memory_test makes the exact backward assertions on the last
// stage, whose memory depends only on its own thread.
//
// Note [Streams in the pipeline]
// Every worker computes on its own stream (Worker::compute_stream(), the thread's current
// stream of its device); a transfer runs on a copy stream, so copies overlap compute. The
// semantics are torchgpipe's Copy/Wait (stream.py, copy.py), written with events. For an
// activation of micro-batch j from stage a (device A) to stage b (device B):
//
//   compute A (worker a): ──F(a,j)──● ready ────────────── F(a,j+1) ──────────►
//                                   ╎
//   copy stream of B:               └─wait─►══copy x→y══● copied ─────────────►
//                                                       ╎
//   compute B (worker b): ─── F(b,j-1) ─────────────────└─wait─► F(b,j) ─────►
//
//   send (worker a's thread)                   recv (worker b's thread)
//   1. ready.record(current stream of A)       5. copied.wait(current stream of B)
//   2. ready.wait(copy stream)                 6. record_stream(y, current stream of B)
//   3. y = empty on B (for the copy stream);
//      copy x -> y on the copy stream;
//      record_stream(x, copy stream)
//   4. copied.record(copy stream); push {y, copied}
//
// record_stream (tensor/stream.h) is what lets both sides drop their tensors at once: x may be
// freed by worker a right after send, y by worker b after its last use, and the caching
// allocator still keeps each block from being reused before the other stream's work on it is
// done. Gradients travel the same way, right to left. Copies run on a stream of
// copy_stream_device(A, B): B's, or A's when B is the host. One copy stream per (device,
// direction), so activations and gradients crossing a link in opposite directions overlap.
// Same device (stages of one GPU, or of one CPU device): no copy; the receiver's stream waits
// for `ready` itself (step 5 with ready instead of copied). On CPU every stream and event is a
// no-op and a copy is a memmove when issued, so this costs nothing there and needs no branch.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "nn/tensors.h"
#include "pipeline/channel.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace pipewright::pipeline {

enum class Direction : uint8_t { kActivation, kGradient };

/// Names one message. `arrival_edge` is the stage boundary through which the message reaches
/// its receiver, as the boundary between stage arrival_edge and stage arrival_edge + 1: an
/// activation arrives from the left, so its receiver is arrival_edge + 1; a gradient arrives
/// from the right, so its receiver is arrival_edge (receiver(), the one rule every transport
/// uses). A message between neighbours crosses exactly that boundary. A skip connection's
/// portal (Note [Portals], stage_skips.h) sets `skip` to its route in the Pipe's SkipLayout:
/// its activation travels from the stashing stage a straight to the popping stage b
/// (arrival_edge b - 1), its gradient straight back to a (arrival_edge a).
struct MessageKey {
  int arrival_edge = 0;
  int microbatch = 0;
  Direction direction = Direction::kActivation;
  int skip = -1;  // route of a portal message; -1 for the messages between neighbours

  /// The key of the message `direction` that stage `receiver` receives for `microbatch`
  /// (through portal route `skip`, or from its neighbour when -1).
  static MessageKey to(int receiver, int microbatch, Direction direction, int skip = -1) {
    return {direction == Direction::kActivation ? receiver - 1 : receiver, microbatch,
            direction, skip};
  }
  /// The stage that receives this message.
  int receiver() const {
    return direction == Direction::kActivation ? arrival_edge + 1 : arrival_edge;
  }

  friend bool operator<(const MessageKey& a, const MessageKey& b) {
    return std::tie(a.skip, a.arrival_edge, a.microbatch, a.direction) <
           std::tie(b.skip, b.arrival_edge, b.microbatch, b.direction);
  }
  /// "activation edge 1 micro-batch 3", "gradient edge 0 of skip 1 micro-batch 2".
  std::string str() const;
};

/// Thrown by recv() after cancel(): the run already failed elsewhere. Workers swallow it (the
/// original exception is what reaches the caller); it never escapes the pipeline.
class RunCancelled : public std::runtime_error {
 public:
  RunCancelled() : std::runtime_error("pipeline run cancelled") {}
};

/// How a recv() should wait, and when its message came (Note [Waiting for a message due
/// soon], channel.h). A transport that cannot wait so ignores `expected` and `lead`.
struct RecvTiming {
  using Duration = std::chrono::steady_clock::duration;
  /// In: how long after the call the message is expected (negative: unknown), and the
  /// margin on each side of that time the receiver spins in (zero: it never spins).
  Duration expected = Duration(-1);
  Duration lead = Duration::zero();
  /// Out: how long after the call the message was sent (zero or less: it was already there).
  Duration arrived = Duration::zero();
};

class Transport {
 public:
  virtual ~Transport() = default;
  /// Hands `tensors` to the receiver of `key`, whose stage lives on `destination`. Does not
  /// wait for the receiver, nor for the device: the message is ready once the work issued so
  /// far on the calling thread's current stream of each tensor's device is done (Note
  /// [Streams in the pipeline]). After cancel() the message is dropped.
  virtual void send(const MessageKey& key, nn::Tensors tensors, Device destination) = 0;
  /// Blocks until the message `key` arrives and returns its tensors (on the destination
  /// device the sender named), with the calling thread's current stream of that device made
  /// to wait for them: work issued on it afterwards sees the data. Throws RunCancelled once
  /// cancel() was called (immediately if it already was).
  nn::Tensors recv(const MessageKey& key) {
    RecvTiming timing;
    return recv(key, timing);
  }
  /// recv(key), waiting as `timing` asks and reporting when the message came (RecvTiming).
  virtual nn::Tensors recv(const MessageKey& key, RecvTiming& timing) = 0;
  /// Wakes every blocked recv() (they throw RunCancelled) and drops pending messages.
  /// Idempotent; safe from any thread.
  virtual void cancel() = 0;
};

/// Threads of one process: a blocking queue per key, copy streams per (device, direction).
class InProcessTransport final : public Transport {
 public:
  InProcessTransport() = default;
  /// Copies on this transport's copy streams (made on first use, see Note [Streams in the
  /// pipeline]). Errors of the copy (device out of memory, CUDA errors) propagate.
  void send(const MessageKey& key, nn::Tensors tensors, Device destination) override;
  using Transport::recv;
  nn::Tensors recv(const MessageKey& key, RecvTiming& timing) override;
  void cancel() override;

 private:
  /// What travels: the tensors (on `destination`) and the events the receiver waits for.
  struct Message {
    nn::Tensors tensors;
    Device destination;
    std::vector<Event> ready;
    std::chrono::steady_clock::time_point sent;  // when send() queued it
  };
  using Queue = Channel<Message>;
  std::shared_ptr<Queue> queue(const MessageKey& key);
  /// The copy stream of `device` for `direction`, made on first use.
  Stream copy_stream(Device device, Direction direction);

  std::mutex mutex_;
  std::map<MessageKey, std::shared_ptr<Queue>> queues_;
  std::map<std::pair<Device, Direction>, Stream> copy_streams_;
  bool cancelled_ = false;
};

}  // namespace pipewright::pipeline
