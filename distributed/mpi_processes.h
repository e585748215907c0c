// MpiProcesses: a Pipe's workers as MPI ranks, and D replicas of the pipeline (PP × DP).
//
// Note [Ranks, stages and replicas]
// A job of p workers × D replicas has p·D ranks; rank = replica · p + worker. Worker w runs
// stages w, w + p, ... (one stage when virtual_stages is 1), exactly as the threads of an
// in-process Pipe do. Activations and gradients travel along a replica's row (its pipeline
// communicator); a stage's gradients are all-reduced down its column (its data-parallel
// communicator):
//
//                 worker 0         worker 1              worker p-1
//                 (stage 0)        (stage 1)             (stage p-1)
//   replica 0:    rank 0   ──act─► rank 1   ──► ··· ──►  rank p-1       pipeline comm
//                   │      ◄─grad─   │                     │
//   replica 1:    rank p   ──act─► rank p+1 ──► ··· ──►  rank 2p-1      pipeline comm
//                   │                │                     │
//                 all-reduce       all-reduce            all-reduce     data-parallel comms
//
// Every rank builds the same Pipe (same model and seed: identical initial weights) with
// PipeOptions::processes set to its MpiProcesses, and calls train_step on its replica's
// share of the global batch (distributed::train_step below does the split and the loss;
// train_step.cc). The collectives are in collectives.cc.
//
// Note [Data-parallel gradients]
// When the last action of a stage in a step finishes on its worker (Note [A stage's last
// action], pipeline/runtime.cc), stage_finished() copies the stage's gradients into buckets of
// about bucket_bytes (one dtype each, parameters in order), each multiplied by this replica's
// weight n_r / N, and starts one MPI_Iallreduce(MPI_SUM) per bucket (GradientBuckets,
// gradient_buckets.h). The worker goes on with its other actions (the cool-down of its other
// stages); worker_finished() waits for the buckets and writes the sums back into .grad. So
// .grad = Σ_r (n_r/N)·g_r = the gradient of the global batch's mean loss. The sum's order is
// MPI's (for D = 2 both ranks compute a + b, identical bits on both; for larger D OpenMPI's
// reduction tree), so PP × DP equals a single process to float rounding, not bitwise. Only
// .grad as it stands after the step is reduced: zero the gradients before each step
// (accumulating over steps would reduce the earlier steps' share again). Gradients on a CUDA
// device go through host buffers, except in a --config=cuda build, where one flat device
// buffer per stage and dtype is summed by NCCL (nccl.h) on the worker's stream and copied
// back on that stream: never run, no GPU here. BatchNorm statistics stay per replica
// (PyTorch DDP's default: each replica's running mean/var see only its own rows).
//
// Note [Failure notices]
// When a step fails on a rank, step_failed() names where (rank, replica, worker, stage,
// micro-batch, action) and sends that text to every rank of the job; their waits (a
// message, a reduction, the loss broadcast) then throw RemoteFailure with it, so every rank
// reports the same origin. See Note [What MPI guarantees when a rank dies] (mpi.h). A failed
// step may leave collectives unmatched (a replica that failed never joins the all-reduce the
// others started), so the MpiProcesses refuses further steps: a failure ends the run, and
// programs end the job (the example prints, then calls MPI_Abort).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/mpi_transport.h"
#include "pipeline/pipe.h"
#include "pipeline/processes.h"

namespace pipewright::distributed {

class GradientBuckets;

class MpiProcesses final : public pipeline::Processes {
 public:
  /// Over the ranks of `world`: `workers` pipeline workers (PipeOptions::devices.size()
  /// used, p) × `replicas` (D) replicas, for a Pipe of `num_stages` stages (p · v). Collective:
  /// every rank of `world` constructs its MpiProcesses in the same order. Throws
  /// std::invalid_argument when the world size is not workers × replicas or num_stages is
  /// not a multiple of workers (naming the numbers), MpiError when MPI fails.
  MpiProcesses(MPI_Comm world, int workers, int replicas, int num_stages,
               size_t bucket_bytes = size_t{1} << 20);
  ~MpiProcesses() override;

  int rank() const { return rank_; }
  int worker() const { return rank_ % workers_; }
  int replica() const { return rank_ / workers_; }
  int workers() const { return workers_; }
  int replicas() const { return replicas_; }
  /// "rank 1 (replica 0, worker 1)".
  const std::string& name() const { return link_->name(); }
  /// The weight n_r / N of this replica's gradients in the sum (default 1 / D).
  void set_gradient_scale(double scale);
  const MpiLink& link() const { return *link_; }

  // ---- pipeline::Processes ----
  bool runs_worker(int worker) const override { return worker == this->worker(); }
  int processes_on_this_machine() const override { return ranks_on_node_; }
  std::unique_ptr<pipeline::Transport> make_transport(const std::vector<int>& stage_worker) override;
  void stage_finished(int stage, nn::Sequential& partition) override;
  void worker_finished(int worker, bool failed) override;
  void step_finished(pipeline::Step& step) override;
  std::exception_ptr step_failed(const pipeline::Step& step, std::exception_ptr error) override;
  /// Over the replica's pipeline communicator (its p workers).
  double combine_over_pipeline(double value, bool max) override;
  /// Over the replica's pipeline communicator.
  void sum_over_pipeline(nn::Tensors& tensors) override;

  // ---- collectives for programs ----
  /// Σ over replicas of `value` (on the data-parallel communicator). Throws as wait().
  double sum_over_replicas(double value);
  /// Copies every stage's parameters and buffers from the rank that trains it (in this
  /// replica) to every rank of the replica, so each holds the whole current model (for
  /// evaluation or a checkpoint on rank 0). Collective over the replica.
  void share_stage_state(const pipeline::Pipe& pipe);
  /// Σ of `value` over every rank of the job.
  double sum_over_job(double value);
  /// Element-wise maximum of `values` over every rank of the job (same length on all).
  void max_over_job(std::vector<double>& values);
  /// On rank 0: the events of every rank's `local` trace in one Trace whose worker w is
  /// rank w (to_chrome_json then draws a process per rank); elsewhere an empty Trace.
  /// Each rank's times stay relative to its own step's start: call barrier() before the
  /// step to start the ranks' clocks together. Collective over the job.
  pipeline::Trace gather_trace(const pipeline::Trace& local);
  /// Waits until every rank of the job arrives (polling, with the timeout and notices).
  void barrier();

 private:
  void wait_for(MPI_Request& request, const std::string& what);
  /// Σ value (or `op`) over the ranks of `comm` (a non-blocking all-reduce waited for by
  /// wait_for).
  double reduce_on(MPI_Comm comm, double value, const std::string& what, MPI_Op op = MPI_SUM);
  /// The worker of `stage` in the latest step's placement (round robin before the first).
  int worker_of(int stage) const;

  int workers_, replicas_, num_stages_, rank_;
  std::vector<int> placement_;  // stage -> worker, from the latest make_transport
  int ranks_on_node_ = 1;
  size_t bucket_bytes_;
  MPI_Comm replica_comm_ = MPI_COMM_NULL;  // collectives along a replica (losses, state)
  MPI_Comm stage_comm_ = MPI_COMM_NULL;    // a worker's column: gradient all-reduce
  MPI_Comm world_ = MPI_COMM_NULL;
  std::shared_ptr<MpiLink> link_;
  int64_t steps_ = 0;
  bool broken_ = false;                         // a step failed: no further step
  std::unique_ptr<GradientBuckets> gradients_;  // the data-parallel all-reduce (D > 1)
};

/// Rows [begin, end) of a global batch of n rows that replica r of `replicas` trains on:
/// contiguous shares, the first n % replicas replicas one row more.
std::pair<int64_t, int64_t> replica_rows(int64_t n, int replica, int replicas);

/// One data-parallel step, Pipe::train_step's two forms over the replicas of the Pipe's own
/// MpiProcesses (PipeOptions::processes): every split input and target is cut to this
/// replica's share [begin, end) = replica_rows(N, r, D) on its own dim (replicated ones go
/// whole to every replica; the single-tensor form's input and target on dim 0 unless
/// `options` says otherwise), then Pipe::train_step runs with `options` and first_sample
/// advanced by begin. Gradients are weighted n_r / N under LossReduction::kMean and 1 under
/// kSum, and all-reduced (Note [Data-parallel gradients]); the result's loss is the global
/// batch's (mean or sum) on every rank; microbatch_losses / sizes and returned outputs are
/// this replica's. Throws std::invalid_argument when the Pipe was built without an
/// MpiProcesses, an input or target is undefined, the single-tensor form's input is a scalar,
/// or the batch has fewer rows than replicas; and what Pipe::train_step throws.
pipeline::StepResult train_step(pipeline::Pipe& pipe, const Tensor& input, const Tensor& target,
                                const pipeline::LossFn& loss_fn,
                                const pipeline::StepOptions& options = {});
pipeline::StepResult train_step(pipeline::Pipe& pipe, const nn::Tensors& inputs,
                                const nn::Tensors& targets, const pipeline::TupleLossFn& loss_fn,
                                const pipeline::StepOptions& options = {});

}  // namespace pipewright::distributed
