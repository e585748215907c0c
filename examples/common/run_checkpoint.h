// The examples' checkpoints: written by one process or by every rank, read under any cut.
//
// One process writes one file, `path` (nn::save_checkpoint's layout: the model's state dict and
// the optimizer's state by parameter name, plus the run's metadata). Across processes rank R
// writes `path.rank<R>`, holding the state-dict entries and optimizer state of the stages it
// trains, the optimizer's hyperparameters and the metadata, with the layout ("layout.ranks",
// "layout.replicas"): the shards of one replica together hold the whole model. A reader takes
// `path` when it exists, else the shards of its replica (of replica 0 when the run that wrote
// them had fewer), merges them by name and loads whatever its own cut needs. So --resume works
// under another --workers, --balance, --schedule, --chunks or data-parallel degree, and in one
// process from a run over many and back. Parameters and optimizer state are the same on every
// replica; BatchNorm statistics are per replica (docs/pipeline.md, Processes).
#pragma once

#include <map>
#include <string>

#include "distributed/mpi_processes.h"
#include "nn/optimizer.h"
#include "pipeline/pipe.h"

namespace pipewright::examples {

/// Writes the checkpoint (atomically, with a checksum): `path` in one process (`processes`
/// null), this rank's shard `path.rank<R>` across processes. Throws what
/// nn::save_safetensors throws.
void save_run_checkpoint(const std::string& path, const pipeline::Pipe& pipe,
                         const nn::Optimizer& optimizer,
                         std::map<std::string, std::string> metadata,
                         const distributed::MpiProcesses* processes);

/// Reads what save_run_checkpoint wrote, under any cut, into pipe.module() and `optimizer`
/// and returns its metadata (the first shard's). Throws std::runtime_error naming the paths
/// when neither `path` nor `path.rank0` exists or a shard is missing, and what
/// nn::load_safetensors / nn::load_checkpoint_tensors throw (a bad or unverified file, a
/// missing or mismatched key).
std::map<std::string, std::string> load_run_checkpoint(const std::string& path,
                                                       pipeline::Pipe& pipe,
                                                       nn::Optimizer& optimizer,
                                                       const distributed::MpiProcesses* processes);

}  // namespace pipewright::examples
