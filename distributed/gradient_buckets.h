// GradientBuckets: the data-parallel all-reduce of one process's stage gradients (Note
// [Data-parallel gradients], mpi_processes.h). MpiProcesses starts it when a stage's last
// action of the step finishes (stage_finished) and finishes it when its worker is done
// (worker_finished):
//
//   start(stage):  .grad ──copy × n_r/N──► bucket (~bucket_bytes, one dtype) ──► MPI_Iallreduce
//                  (CUDA gradients with NCCL: one flat device buffer per dtype ──► ncclAllReduce)
//   finish():      wait for each bucket ──► sums copied back into .grad
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace pipewright::nn {
class Sequential;
}

namespace pipewright::distributed {

class NcclGroup;

class GradientBuckets {
 public:
  /// How a request is awaited: MpiProcesses::wait_for (a timeout, and other ranks' failure
  /// notices), naming `what` in its errors.
  using WaitFn = std::function<void(MPI_Request& request, const std::string& what)>;

  /// Sums over `stage_comm` (the ranks that hold the same stages in every replica; not owned,
  /// it must outlive this), in buckets of about `bucket_bytes`, each gradient weighted
  /// `scale` (n_r / N).
  GradientBuckets(MPI_Comm stage_comm, size_t bucket_bytes, double scale, WaitFn wait_for);
  /// Buckets of a failed step stay with MPI (abandon()): leaked on purpose.
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  /// The weight of this replica's gradients in the sum (n_r / N).
  void set_scale(double scale) { scale_ = scale; }

  /// Copies `partition`'s gradients (stage `stage`), weighted, into buckets and starts one
  /// all-reduce per bucket (on the GPU with NCCL where the build has it). Throws
  /// std::invalid_argument for a gradient of dtype int64, MpiError when MPI fails.
  void start(int stage, nn::Sequential& partition);
  /// Waits for every bucket started and writes the sums back into the .grad tensors. Throws
  /// what WaitFn throws; the buckets not yet finished are then abandoned.
  void finish();
  /// Gives up the buckets of a failed step: MPI may still use their buffers, so they are kept
  /// until destruction and then leaked.
  void abandon();

 private:
  struct Bucket;
  struct DeviceBucket;
  void reduce_on_device(const std::vector<Tensor>& grads);

  MPI_Comm stage_comm_;
  size_t bucket_bytes_;
  double scale_;
  WaitFn wait_for_;
  std::vector<std::unique_ptr<Bucket>> pending_;    // the local worker's, started this step
  std::vector<std::unique_ptr<Bucket>> abandoned_;  // of a failed step: MPI may still use them
  std::vector<DeviceBucket> pending_device_;        // same, on a GPU through NCCL
  std::unique_ptr<NcclGroup> nccl_;                 // made at the first gradient on a GPU
};

}  // namespace pipewright::distributed
