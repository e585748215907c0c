// NcclGroup: NCCL all-reduce among the ranks of an MPI communicator, one GPU each.
//
// Built with NCCL only under --config=cuda (nccl.cc); elsewhere nccl_stub.cc, where
// nccl_available() is false and the constructor throws. MpiProcesses uses it for the
// data-parallel all-reduce of gradients that live on a CUDA device (Note [Data-parallel
// gradients], mpi_processes.h): the sum then stays on the GPUs, ordered on the worker's
// stream, instead of crossing through host memory. This machine has no GPU: the NCCL path
// compiles and links in CI but has never run (docs/cuda.md, "Never run on a GPU").
#pragma once

#include <mpi.h>

#include <memory>

#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace pipewright::distributed {

/// Whether this build has NCCL (--config=cuda).
bool nccl_available();

class NcclGroup {
 public:
  /// Collective over `comm`: rank 0 makes the NCCL unique id, MPI broadcasts it, every rank
  /// joins with ncclCommInitRank on `device` (a CUDA device). Throws std::logic_error
  /// without NCCL, MpiError / std::runtime_error ("NCCL: <NCCL's error string>") otherwise.
  NcclGroup(MPI_Comm comm, Device device);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  /// Sums `flat` (contiguous float32 or float64, on the group's device) over the group, in
  /// place, enqueued on `stream` (a stream of that device): work issued on it afterwards sees
  /// the sum. Throws std::invalid_argument for another dtype or device, std::runtime_error
  /// for NCCL errors.
  void all_reduce_sum(Tensor& flat, const Stream& stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pipewright::distributed
