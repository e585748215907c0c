// The examples' checkpoints: written by one process or by every rank, read under any cut.
//
// One process writes one file, `path` (nn::save_checkpoint's layout: the model's state dict and
// the optimizer's state by parameter name, plus the run's metadata). Across processes every
// rank R writes a shard, `path.<G>.rank<R>`, for the run's generation G (the epoch or step the
// checkpoint follows): the state-dict entries and optimizer state of the stages it trains, the
// optimizer's hyperparameters and the metadata, with the layout ("layout.ranks",
// "layout.replicas"). The shards of one replica together hold the whole model. Then rank 0
// writes `path` itself as the commit record (Note [Checkpoints that commit], run_checkpoint.cc).
// A reader takes `path`: a whole checkpoint, or a commit record naming the shards of one
// generation, of which it merges its replica's (replica 0's when the run that wrote them had
// fewer) by name and loads whatever its own cut needs. So --resume works under another
// --workers, --balance, --schedule, --chunks or data-parallel degree, and in one process from
// a run over many and back. Parameters and optimizer state are the same on every replica;
// BatchNorm statistics are per replica (docs/pipeline.md, Processes).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "distributed/mpi_processes.h"
#include "nn/optimizer.h"
#include "pipeline/pipe.h"

namespace pipewright::examples {

/// Writes the checkpoint of `generation` (the epoch or step it follows: the same on every
/// rank, larger than any earlier save's of the run): `path` in one process (`processes` null,
/// atomically, with a checksum); across processes, this rank's shard and, once every rank's
/// is durable, the commit record; the rank's shards of other generations are removed after the
/// commit. Collective across processes: every rank calls it at the same point. Throws what
/// nn::save_safetensors throws (on the rank that failed), std::runtime_error naming the ranks
/// on the others when a shard or the commit could not be written (nothing is committed then:
/// `path` still names the previous checkpoint), and communication errors.
void save_run_checkpoint(const std::string& path, const pipeline::Pipe& pipe,
                         const nn::Optimizer& optimizer,
                         std::map<std::string, std::string> metadata, int64_t generation,
                         distributed::MpiProcesses* processes);

/// What load_run_checkpoint read.
struct LoadedRunCheckpoint {
  /// The run's metadata as saved (the first shard's across processes), without the layout's
  /// and the commit's own entries.
  std::map<std::string, std::string> metadata;
  /// One line per generation newer than the loaded one whose shards were on disk without a
  /// commit record (a run stopped while saving), left alone by the load (see
  /// remove_stale_shards); empty when there was none.
  std::string ignored;
  /// The committed generation loaded; -1 for a one-process checkpoint or earlier versions'
  /// shards.
  int64_t generation = -1;
};

/// Reads what save_run_checkpoint wrote, under any cut, into pipe.module() and `optimizer`
/// (also the shards `path.rank<R>` that earlier versions wrote without a commit record, when
/// their metadata agree: one point of the run).
/// Throws std::runtime_error naming the paths when there is no `path` (saying so when only
/// uncommitted shards are there), a shard of the committed generation is missing, or a shard
/// is not the one committed (another generation, or other contents: a later run's partial
/// save under the same name); and what nn::load_safetensors / nn::load_checkpoint_tensors throw
/// (a bad or unverified file, a missing or mismatched key).
LoadedRunCheckpoint load_run_checkpoint(const std::string& path, pipeline::Pipe& pipe,
                                        nn::Optimizer& optimizer,
                                        const distributed::MpiProcesses* processes);

/// For a run that resumed from `resume_path` (generation `committed`, as loaded): when it also
/// saves there (`save_path` names the same file), removes this rank's shards of every other
/// generation and its temporary files, as its next save's clean-up would. A rank killed after
/// a commit and before that clean-up leaves the previous generation's shards, and a resumed
/// run with nothing left to train saves nothing (Note [Checkpoints that commit]). Never for a
/// run that only reads the checkpoint: it would delete the shards of another run's save in
/// progress. Does nothing in one process, for committed < 0 or another save path. Errors
/// removing a file are ignored (as the save's clean-up does).
void remove_stale_shards(const std::string& resume_path, const std::string& save_path,
                         int64_t committed, const distributed::MpiProcesses* processes);

}  // namespace pipewright::examples
