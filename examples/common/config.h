// The Fashion-MNIST example's settings: every command-line flag, with its default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/precision.h"
#include "tensor/matmul_precision.h"
#include "pipeline/schedule/checkpoint_mode.h"
#include "tensor/device.h"

namespace pipewright::examples {

struct TrainConfig {
  // ---- training ----
  int epochs = 10;                        // the run's length (sets the learning-rate curve)
  int stop_after = 0;                     // stop after this epoch, to --resume later (0: run all)
  int64_t batch_size = 256;
  double lr = 1e-3;
  std::string lr_schedule = "cosine";     // "cosine" (decays to 0 over the run) or "constant"
  std::string optimizer = "adam";         // "sgd" (with `momentum`) or "adam"
  double momentum = 0.9;                  // SGD's momentum (--momentum)
  double weight_decay = 0.0;
  std::vector<int64_t> hidden = {512, 512};  // widths of the hidden layers
  double dropout = 0.2;
  uint64_t seed = 0;

  // ---- pipeline ----
  // Pipeline workers (threads, or MPI ranks across processes), each on its own device; the
  // Pipe has workers x virtual_stages stages.
  int workers = 2;
  std::vector<int> balance;               // empty: split the parameters evenly
  // "time" or "size": profile the layers and cut by pipeline::balance_by_time / _size
  // (pipeline/balance.h) instead; balance must then be empty.
  std::string auto_balance;
  int chunks = 4;
  // Activations of this small MLP fit easily; recomputing them would only cost time.
  pipeline::Checkpoint checkpoint = pipeline::Checkpoint::kNever;
  // ZB-H1 (zero bubble, Qi et al. 2023): each backward split into its input-gradient and
  // weight-gradient halves, the weight halves filling the gaps where GPipe and 1F1B idle.
  // The same gradients as GPipe's; on the main job 1.18x GPipe's samples/s with less memory
  // (docs/BENCHMARKS.md, "Step breakdown").
  std::string schedule = "zb-h1";
  // Virtual stages per worker (PipeOptions::virtual_stages): 0 = the least the schedule's
  // registry row takes (pipeline/schedule/registry.h: 2 for the V-shaped ones, else 1); 2 or
  // more for the interleaved ones. The model is cut into stages x virtual stages partitions
  // (balance has that many).
  int virtual_stages = 0;
  // "auto": balance, schedule, chunks, virtual stages and recomputes from pipeline::plan
  // (pipeline/planner/planner.h) under memory_cap; the flags that set those are then ignored.
  std::string plan;
  int64_t memory_cap = 0;                 // bytes per device for --plan auto (0: no cap)
  bool explain = false;                   // print the plan's alternatives and why each lost
  // --plan auto: the planner's profile and measured stages, read from this file when it was
  // made for the same model, sample shapes and threads, written otherwise (PlanOptions::cache)
  std::string plan_cache;
  // --plan auto: how many of the best plans run for a few steps before the fastest measured
  // is taken (PlanOptions::trials); -1: the planner's default
  int plan_trials = -1;
  std::vector<Device> devices;            // per worker; empty: cpu:0 .. cpu:(workers-1)
  int threads = 0;                        // intra-op threads per worker; 0: cores / workers
  // The stages' matrix products in float32 or with bfloat16 / float16 operands and float32
  // sums (PipeOptions::precision; Note [The precision policy] in autograd/precision.h)
  autograd::Precision precision = autograd::Precision::kFloat32;
  // How float32 products may compute on a GPU: "highest" (float32) or "high" (TF32;
  // tensor/matmul_precision.h), set for the process before the run (run_example)
  Float32MatmulPrecision float32_matmul_precision = Float32MatmulPrecision::kHighest;
  // --cuda-graphs: whole steps captured once and replayed as CUDA graphs (PipeOptions::
  // cuda_graphs, Note [A step as one graph] in pipeline/step_graph.h), where a step allows it
  bool cuda_graphs = false;
  // Across processes (main() sets `distributed` when started by mpirun): one MPI rank per
  // worker and replica, workers x data_parallel ranks in all (distributed/mpi_processes.h).
  int data_parallel = 1;                  // replicas of the pipeline, each on its batch share
  bool distributed = false;

  // ---- data and files ----
  std::string data_dir;                   // empty: the Debian package's directory
  int64_t train_limit = 0;                // 0: all 60,000 training images
  int64_t test_limit = 0;                 // 0: all 10,000 test images
  std::string save;                       // checkpoint written after every epoch
  std::string resume;                     // checkpoint to continue from
  std::string trace;                      // Chrome trace of one step of the run
  int64_t trace_step = 1;                 // which: the run's trace_step-th step (1-based)

  // ---- output ----
  bool progress = true;                   // per-epoch progress bar
};

/// Virtual stages per worker: config.virtual_stages, or the schedule's when that is 0.
int virtual_stages_per_worker(const TrainConfig& config);
/// Partitions (stages) the model is cut into: workers x virtual_stages_per_worker(config).
int num_partitions(const TrainConfig& config);

/// Throws std::invalid_argument naming the flag and value for any setting out of range
/// (epochs < 1, batch size < 1, lr <= 0, unknown optimizer, dropout outside [0, 1), workers < 1,
/// balance not summing to the layer count, chunks < 1, fewer devices than workers, ...).
/// `num_layers` is the length of the model's Sequential.
void validate(const TrainConfig& config, size_t num_layers);

}  // namespace pipewright::examples
