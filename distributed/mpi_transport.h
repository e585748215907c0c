// MpiTransport: pipeline messages between processes, one MPI rank per pipeline worker.
//
// The runtime's Transport (pipeline/transport.h) with the two ends in different processes:
//
//   rank 0 (worker 0)                                   rank 1 (worker 1)
//   ─────────────────                                   ─────────────────
//   worker thread: F(0,j) ─ send ─► pack ─► outbox       comm thread: Iprobe ─► Recv ─► inbox
//   comm thread:   outbox ─► MPI_Isend ═══ bytes ═════►                               │
//                                                         worker thread: recv(key) ◄──┘ unpack
//
// The bytes of a message: Note [The wire format] (wire_format.h). The thread that moves them:
// Note [The communication thread] (mpi_link.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "distributed/mpi_link.h"
#include "distributed/wire_format.h"
#include "pipeline/transport.h"

namespace pipewright::distributed {

/// The stage that receives the message `key`.
int receiving_stage(const pipeline::MessageKey& key);

/// The Transport of one step over an MpiLink (Note [The wire format]). `stage_worker[s]`:
/// the worker (pipeline rank) of stage s.
class MpiTransport final : public pipeline::Transport {
 public:
  MpiTransport(std::shared_ptr<MpiLink> link, int64_t step, std::vector<int> stage_worker);
  /// Packs `tensors` (copied to the host first when on a GPU) and queues them for the
  /// receiving stage's rank. Throws std::invalid_argument for a key whose receiving stage
  /// does not exist.
  void send(const pipeline::MessageKey& key, nn::Tensors tensors,
            Device destination) override;
  /// Waits for the message and unpacks it onto the device the sender named. Throws as
  /// MpiLink::take, and std::runtime_error for a malformed message.
  using pipeline::Transport::recv;
  /// Waits in MPI's own way (`timing`'s expectation is not used); `timing.arrived` is the
  /// time recv waited.
  nn::Tensors recv(const pipeline::MessageKey& key, pipeline::RecvTiming& timing) override;
  void cancel() override;

 private:
  std::vector<int64_t> id(const pipeline::MessageKey& key) const;

  std::shared_ptr<MpiLink> link_;
  int64_t step_;
  std::vector<int> stage_worker_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace pipewright::distributed
