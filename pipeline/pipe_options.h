// PipeOptions: how a Pipe cuts, places and schedules a model (torchgpipe's GPipe arguments,
// plus what the newer schedules need).
//
//   pipeline::Pipe pipe(std::move(model), {.balance = {3, 1},
//                                          .devices = {Device::cpu(0), Device::cpu(1)},
//                                          .chunks = 8,
//                                          .schedule = {.recompute = Checkpoint::kExceptLast}});
//
// The schedule is one value, ScheduleSpec (schedule/spec.h): a registered name, virtual
// stages, placement and what recomputes; a plan is a PipeOptions (Plan::pipe_options).
// Interleaved and V-shaped schedules (schedule.virtual_stages = v > 1): balance has p·v
// entries (one per virtual stage), devices p entries (one per worker). Stage s runs on worker
// stage_worker[s], on devices[stage_worker[s]]; by default the placement of the schedule:
// round robin (stage s on worker s % p), or the V shape (worker w holds stages w and 2p-1-w;
// v = 2) for the schedules whose registry row says so (schedule/registry.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/precision.h"
#include "pipeline/schedule/checkpoint_mode.h"
#include "pipeline/schedule/spec.h"
#include "pipeline/worker_cpus.h"
#include "tensor/device.h"

namespace pipewright::pipeline {

class Processes;

struct PipeOptions {
  /// Children per stage, in order; Σ balance = number of children of the Sequential.
  std::vector<int> balance = {};
  /// One device per worker (= per stage when virtual_stages is 1). Several workers may share
  /// a device (each still gets its own thread). Extra devices are ignored, as in torchgpipe.
  std::vector<Device> devices = {};
  /// Micro-batches per mini-batch, at most: a batch of N rows is cut as torch.chunk cuts it,
  /// ceil(N / chunks) rows per micro-batch, which can make fewer (N 10, chunks 8: 5 of 2).
  int chunks = 1;
  /// How every training step is scheduled: the registered schedule, its virtual stages and
  /// placement, which cells recompute (schedule/spec.h). The Pipe builds it for each batch's
  /// micro-batch count; StepOptions::schedule replaces it for one step.
  ScheduleSpec schedule = {};
  /// The dtype the stages' matrix products take their operands in: kFloat32, or kBFloat16 /
  /// kFloat16 for mixed precision (float32 accumulation, float32 master weights, gradients
  /// and optimizer; 16-bit values between layers). Every cell runs under
  /// autograd::PrecisionScope(precision) with its stage's working copies made once per step,
  /// so a step computes what the un-pipelined model computes under the same scope. Note [The
  /// precision policy] in autograd/precision.h.
  autograd::Precision precision = autograd::Precision::kFloat32;
  /// Replay whole training steps as CUDA graphs (Note [A step as one graph], step_graph.h):
  /// Pipe::train_step with an optimizer runs its first step of a kind eagerly, captures the
  /// second and replays later ones with a handful of host calls; stages on several GPUs of
  /// this process make one graph over them (Note [A step over devices]). Steps it cannot
  /// capture run eagerly, and the Pipe says why once on stderr. Ignored on CPU.
  bool cuda_graphs = false;
  /// Put every nn::BatchNorm1d in deferred mode: running statistics over the whole
  /// mini-batch, committed once per mini-batch (torchgpipe's deferred_batch_norm).
  bool deferred_batch_norm = false;
  /// Parameters that are one parameter of the model, held as a copy on each of several
  /// stages (a GPT's token embedding on the first stage and its LM head on the last: DeepSpeed's
  /// TiedLayerSpec, Megatron's embedding group). Each group names its copies by state-dict key
  /// ({"0.wte.weight", "9.weight"}), all of one shape and dtype; the model gives each stage
  /// its own tensor (one tensor shared by stages on two workers is refused). The Pipe copies
  /// the first's value into the others when it is built and, after every backward (train_step;
  /// the backward through forward()'s output), sets each copy's .grad to the group's summed
  /// gradient (over processes too), so an optimizer over pipe.parameters() keeps the copies
  /// bitwise equal. Note [Tied parameters] in tied_parameters.h.
  std::vector<std::vector<std::string>> tied_parameters = {};
  /// Seeds the workers' generators (worker w gets mix_seed(seed, w)); see Pipe::manual_seed.
  uint64_t seed = 0;
  /// Intra-op threads of each worker (tensor/threads.h, tensor/parallel.h); 0 = max(1,
  /// hardware_threads() / workers), so that the workers computing at once use every core
  /// once (tensor/threads.h); with `processes`, max(1, hardware_threads() / processes on
  /// this machine).
  int threads_per_worker = 0;
  /// Which CPUs the worker threads may run on (worker_cpus.h): kShared (default), every
  /// worker on all of the process's CPUs, so the scheduler can move a worker off a core that
  /// another process is using; kPinned, each worker on its own threads_per_worker CPUs;
  /// kInherited, the mask of the thread that built the Pipe. Ignored with `processes` (one
  /// worker per process; the launcher places processes). Note [Worker CPUs] in worker.cc.
  WorkerCpus worker_cpus = WorkerCpus::kShared;
  /// Null: every worker is a thread of this process. Otherwise which workers run here and
  /// how messages leave the process (processes.h; distributed/mpi_processes.h makes one per
  /// MPI rank). Every process then builds the same Pipe; train_step runs only the local
  /// workers, and Pipe::forward throws std::invalid_argument.
  std::shared_ptr<Processes> processes = {};
};

}  // namespace pipewright::pipeline
