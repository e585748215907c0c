// Deferred BatchNorm: running statistics over the whole mini-batch, not per micro-batch.
//
// With micro-batches, an ordinary BatchNorm updates its running mean/var once per
// micro-batch, with micro-batch statistics: m updates of a noisier estimate instead of one
// update from the mini-batch, so a pipelined model drifts from the plain one. torchgpipe's
// DeferredBatchNorm normalises each micro-batch with its own statistics (as training-mode
// BatchNorm must) but accumulates the sums over the mini-batch and commits one running-stat
// update when the mini-batch is complete.
//
//   F0 F1 ... F(m-1)   each: y = BN(x_j) with x_j's stats; sums += Σx_j, Σx_j² (per channel)
//   commit             running = (1-momentum)·running + momentum·(mean, UNBIASED var of all)
//
// nn::BatchNorm1d does the arithmetic (set_deferred / commit_deferred); the runtime's part is
// finding every BatchNorm1d in the model (recursively) and committing exactly once per
// mini-batch: after the forwards of Pipe::forward, after the whole step of train_step — also
// when a small batch yields fewer micro-batches than `chunks` (torchgpipe waited for `chunks`
// micro-batches and so carried a short batch's sums into the next step). A step that fails
// midway discards what its micro-batches accumulated (discard()), so the next step's update
// is that step's alone. Recomputation adds nothing: BatchNorm1d skips its statistics while
// autograd::is_recomputing().
#pragma once

#include <vector>

#include "nn/module.h"

namespace pipewright::nn {
class BatchNorm1d;
}

namespace pipewright::pipeline {

class DeferredBatchNorm {
 public:
  /// Puts every nn::BatchNorm1d inside `module` in deferred mode.
  explicit DeferredBatchNorm(nn::Module& module);
  /// Takes them out of deferred mode again.
  ~DeferredBatchNorm();
  DeferredBatchNorm(const DeferredBatchNorm&) = delete;
  DeferredBatchNorm& operator=(const DeferredBatchNorm&) = delete;

  /// Commits the accumulated mini-batch statistics of every BatchNorm1d (once per mini-batch).
  void commit();
  /// Drops the statistics accumulated since the last commit (a step that failed midway:
  /// its micro-batches must not leak into the next step's update).
  void discard();

 private:
  std::vector<nn::BatchNorm1d*> layers_;
};

/// Every nn::BatchNorm1d in `module` and its descendants, in registration order.
std::vector<nn::BatchNorm1d*> find_batch_norms(nn::Module& module);

}  // namespace pipewright::pipeline
