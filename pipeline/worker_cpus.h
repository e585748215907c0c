// Which CPUs a Pipe's worker threads may run on (PipeOptions::worker_cpus; Note [Worker
// CPUs], worker.cc, says why the default is what it is, with the measurements).
#pragma once

#include <vector>

namespace pipewright::pipeline {

enum class WorkerCpus {
  /// Every worker may run on every CPU of the process (process_cpus(), tensor/threads.h), and
  /// the kernel's scheduler shares them out. A worker does not keep a narrower mask inherited
  /// from the thread that built the Pipe (libgomp binds the initial thread to one core when
  /// OMP_PROC_BIND is set).
  kShared,
  /// Worker w on its own threads_per_worker CPUs of process_cpus() (in topology order: a
  /// core's SMT siblings adjacent) when every worker's share fits; else as kShared. Stages
  /// then share no core — and a busy process beside the training slows the one worker
  /// whose core it lands on, and with it the whole pipeline.
  kPinned,
  /// The workers keep the mask they inherit from the calling thread: for Pipes that train at
  /// the same time in one process, or a caller that places threads itself.
  kInherited,
};

/// The intra-op threads each of `workers` threads computing at once gets by default, so that
/// together they use the machine's cores once: max(1, hardware_threads() / workers) (tensor/
/// threads.h). The one place the rule is written: the Pipe (workers in a process, or processes
/// on a machine), the planner's profile and search, and the runtime-overhead probe use it.
/// workers < 1 counts as 1.
int default_threads_per_worker(int workers);

/// The CPUs each of `num_workers` workers with `budget` intra-op threads pins itself to, by
/// `policy` (above); an empty list leaves that worker's inherited mask. num_workers >= 0,
/// budget >= 1.
std::vector<std::vector<int>> worker_cpus(int num_workers, int budget, WorkerCpus policy);

}  // namespace pipewright::pipeline
