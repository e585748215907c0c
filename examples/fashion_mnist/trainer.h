// Training an MLP on Fashion-MNIST through a pipeline: the example's engine, separate from
// main() so tests can run it on a slice of the data.
//
//   784 -> [Linear -> BatchNorm1d -> ReLU -> Dropout] x len(hidden) -> Linear -> 10 logits
//
// The model is cut into `workers` x virtual-stages partitions (by --balance, or evenly by
// parameter count), each worker on its own virtual CPU device and thread; every
// mini-batch is split into `chunks` micro-batches and run on the chosen schedule
// (Pipe::train_step), the cross-entropy computed per micro-batch on the last stage.
// BatchNorm runs in deferred mode, so its running statistics are those of the whole
// mini-batch, as without a pipeline.
//
// Across processes (config.distributed, set by main() under mpirun): rank = replica *
// workers + worker runs one worker's stages of one replica (distributed/mpi_processes.h),
// each replica trains on its share of every mini-batch, rank 0 prints, and evaluates after
// every rank received the stages it does not train. --save there writes one shard per rank,
// `<path>.rank<R>`, with the stages that rank trains (examples/common/run_checkpoint.h).
//
// Determinism: the same flags and seed give the same loss curve and bitwise-identical weights,
// and training k epochs, saving, and resuming for N-k more equals training N straight: the
// checkpoint holds the weights, BatchNorm buffers, optimizer state by parameter name, epoch,
// the data loader's shuffle generator and the random step (Dropout's masks are keyed by seed,
// step, layer and sample: Note [Keyed randomness]). --resume accepts a checkpoint written
// under another cut (stages, balance, schedule, chunks, data-parallel degree, one process or
// many): the run continues to float rounding (bitwise under the same cut).
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/fashion_mnist.h"
#include "examples/common/pipeline_stats.h"
#include "examples/common/config.h"
#include "nn/module.h"
#include "nn/sequential.h"
#include "pipeline/pipe.h"
#include "pipeline/planner/memory_replay.h"

namespace pipewright::examples {

struct EpochStats : PipelineStats {  // the epoch's bubble, busy times and peak memory
  int epoch = 0;                      // 1-based
  double train_loss = 0;              // mean of the task's loss over the epoch's samples
  double test_accuracy = 0;           // fraction of test images classified correctly
  double test_loss = 0;               // the task's test loss when it reports one (autoencoder)
  double seconds = 0;                 // wall time of the epoch's training (not evaluation)
  double samples_per_second = 0;
  std::vector<double> step_losses;    // per step: the mini-batch's mean loss
};

struct TrainResult {
  std::vector<EpochStats> epochs;     // the epochs run by this call (not the resumed ones)
  nn::NamedTensors final_state;       // the model's state dict after the last epoch (CPU copies)
  // --plan auto only (empty otherwise), per worker's device: the plan's predicted peak with
  // its bounds, and the largest peak measured inside train_step over the steady state's full
  // mini-batches (the optimizer's step apart), in bytes.
  std::vector<pipeline::DevicePeak> planned_peaks;
  std::vector<int64_t> step_peak_bytes;
};

/// The MLP described above (weights drawn from a Generator seeded with `seed`).
nn::Sequential build_model(const std::vector<int64_t>& hidden, double dropout, uint64_t seed);

/// The balance train() uses: config.balance when given; with config.auto_balance "time", the
/// exact min-max cut of each layer's measured forward + backward time on one micro-batch of
/// the first mini-batch (pipeline::balance_by_time; timings vary run to run, so the cut may
/// too); with "size", the cut of activation bytes of one micro-batch plus parameter bytes x
/// (5 for Adam, 3 for SGD with momentum) (pipeline::balance_by_size, deterministic); else
/// pipeline::balance_by_parameters: each Linear with the BatchNorm1d, ReLU and Dropout after
/// it is one block, the blocks cut by parameter count (4 | 5 for the default MLP). The model
/// is left as it was. Throws what those functions throw.
///
/// Why the default is not auto-time, although on a quiet machine it picks the same 4 | 5
/// (docs/BENCHMARKS.md, "Balance: the block cut"): the profile's timings vary from run to run,
/// and under load it also picked 3 | 6, so the cut would change between runs of the same
/// flags, and the cut changes the results (each worker draws its own Dropout masks: one
/// epoch of 20,000 samples trained to 0.5911 with 4 | 5, 0.5933 with 1 | 8 and 3 | 6) and
/// would break --resume's bitwise equality. The block cut is what the profile finds, with
/// neither cost. Against the layer-level parameter cut 1 | 8, 4 | 5 trains faster, with the
/// stages' busy times closer and the measured bubble nearer its replay (measured side by side
/// on a quiet machine: docs/BENCHMARKS.md, "Balance: the block cut").
std::vector<int> choose_balance(const TrainConfig& config, nn::Sequential& model,
                                const data::Dataset& train_set);

/// What train() trains and how it scores it. classifier_task() is the MLP above; the other
/// Fashion-MNIST examples (a residual network, a denoising autoencoder) bring their own.
struct Task {
  /// The model (weights drawn from a Generator seeded with config.seed).
  std::function<nn::Sequential(const TrainConfig&)> build_model;
  /// How the images are loaded (normalisation; the limit comes from the config).
  data::FashionMnistOptions images;
  /// Optional: the (input, target) that train_step gets for mini-batch `batch`, the run's
  /// step-th (0-based, counted across epochs); unset: (batch.inputs, batch.targets).
  std::function<std::pair<Tensor, Tensor>(const TrainConfig& config, const data::Batch& batch,
                                          int64_t step)>
      make_step;
  /// Per micro-batch on the last stage; printed as "train <loss_name>".
  pipeline::LossFn loss;
  std::string loss_name = "loss";
  /// After each epoch, with the pipe in eval mode under NoGradGuard: scores the test set,
  /// fills stats.test_accuracy / test_loss and returns what the epoch's line shows
  /// ("test acc 0.9001").
  std::function<std::string(pipeline::Pipe& pipe, const data::Dataset& test, EpochStats& stats)>
      evaluate;
  /// Optional: more lines for the run's header, after the pipeline's (e.g. the skip routes).
  std::function<void(const pipeline::Pipe& pipe, std::ostream& out)> describe;
};

/// The MLP above with cross-entropy, scored by test accuracy.
Task classifier_task();

/// Trains per `config`, printing progress and per-epoch results to `out`. Throws
/// std::invalid_argument for bad settings (see validate), std::runtime_error for missing
/// data or a bad checkpoint (naming the path), and whatever the pipeline throws.
TrainResult train(const TrainConfig& config, std::ostream& out);
/// The same for another task.
TrainResult train(const TrainConfig& config, std::ostream& out, const Task& task);

}  // namespace pipewright::examples
