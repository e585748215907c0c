// plan: the fastest way to run a model on given devices under a memory cap per device:
// balance, schedule, chunks, virtual stages and which cells recompute, chosen together.
//
//   pipeline::Plan plan = pipeline::plan(model, {.input = x, .target = y, .loss = loss_fn},
//                                        devices, {.memory_cap_bytes = 64 << 20});
//   std::cout << plan.explain();                       // the choice and the runners-up
//   pipeline::Pipe pipe(std::move(model), plan.pipe_options(devices));  // the plan, whole
//   pipe.train_step(x, y, loss_fn);
//
// Note [How the planner searches]
// 1. Profile every layer (profile.h; cached in options.cache): times of F, B, I, W at two
//    micro-batch sizes (the smallest the search tries and the whole batch), bytes kept,
//    bytes sent.
// 2. For every registered schedule (schedule/registry.h), every virtual-stage count it takes
//    (up to max_virtual_stages), every chunks candidate and a few balances — the min-max cut
//    of F+B, of F+B+R, of parameters (balance_by_parameters' blocks), and under a cap the
//    min-max cut of F+B among those whose stages' estimated memory fits it and the cuts of
//    least estimated memory without and with recomputes (cuts.h; a cut may fall inside a
//    skip connection, no stage inside one: Note [Cuts inside a skip]) — replay the
//    schedule with the stages' summed times (replay.h; on shared processors when CPU
//    workers outnumber the cores, Note [Workers sharing cores] in search.cc) and replay
//    each device's memory (memory_replay.h) with the stages' estimated bytes
//    (stage_estimate.h); where a device is over the cap, place recomputes cell by cell
//    (recompute_placement.h). Candidates slower than the best that fits are not refined.
// 3. Measure the stages of the best candidates exactly (stage_probe.h) — and of the fastest
//    few whose estimate was over the cap, as estimates err — place their recomputes again
//    with those bytes, and take the best that fits: its predicted step time and bubble
//    (the replay) and each device's peak (exact on CPU devices up to the
//    messages' timing, DevicePeak::low..high).
// 4. Run the best few that fit for a few steps each (Note [Trying the best plans],
//    trial.h) and return the fastest measured: what neither the profile nor the replay sees
//    (workers switched on shared cores, caches) decides between plans predicted close.
// When nothing fits, plan() throws NoPlanFits naming the smallest cap that would: the least
// peak along the recompute placements of the configurations it measured (Note [Placing
// recomputes]); exact when `verify` covers every configuration, as in small searches.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/sequential.h"
#include "pipeline/pipe_options.h"
#include "pipeline/planner/memory_replay.h"
#include "pipeline/planner/profile.h"
#include "pipeline/planner/runtime_overhead.h"
#include "pipeline/planner/trial.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/step.h"

namespace pipewright::pipeline {

enum class Objective {
  kStepTime,    // the shortest predicted step that fits the cap
  kPeakMemory,  // the smallest largest device peak (ties: the shorter step)
};

struct PlanOptions {
  /// Bytes each device may hold at its peak (parameters, gradients, optimizer state,
  /// activations, messages); 0: no cap.
  int64_t memory_cap_bytes = 0;
  Objective objective = Objective::kStepTime;
  /// Registered schedule names to consider; empty: every registered schedule.
  std::vector<std::string> schedules = {};
  /// chunks (PipeOptions::chunks) to consider; empty: 1, 2, 3, 4, 6, 8, 12, 16, 24, 32 up
  /// to the batch size.
  std::vector<int> chunks = {};
  /// The most virtual stages per worker tried for schedules that take any v.
  int max_virtual_stages = 2;
  /// Virtual stages per worker to consider; empty: every v a schedule takes, up to
  /// max_virtual_stages for those that take any (then ignored).
  std::vector<int> virtual_stages = {};
  /// Optimizer state bytes per parameter byte: 2 for Adam and AdamW, 1 for SGD with
  /// momentum, 0 for plain SGD.
  double optimizer_state_factor = 2.0;
  /// As PipeOptions::deferred_batch_norm.
  bool deferred_batch_norm = false;
  /// Intra-op threads per worker (0: max(1, hardware_threads() / devices), the Pipe's).
  int threads_per_worker = 0;
  /// A file holding the profile, the measured stages and the trials' steps: read when it was
  /// made for the same model, sample shapes and threads, written otherwise; trials whose
  /// plans all ran before are not run again (Plan::trials_from_cache). Empty: no file.
  std::string cache = {};
  /// How many of the best candidates are measured exactly before choosing.
  int verify = 6;
  /// How many runners-up Plan::alternatives keeps.
  int alternatives = 6;
  /// How many of the best plans that fit are run for a few training steps before one is
  /// returned, the fastest measured (Note [Trying the best plans], trial.h): the predicted
  /// best and the best of each other (schedule, virtual stages, chunks) predicted within
  /// PlanOptions::trial_margin of it. 0 or 1: none run (the predicted best is returned).
  /// plan(profile, ...) has no model to run and ignores it.
  int trials = 3;
  /// Tried: plans predicted at most this many times the best's step.
  double trial_margin = 1.15;
  /// About how long the trials take in all, in seconds (each plan runs at least one timed
  /// step per round, three rounds, and a warm-up step before each round).
  double trial_seconds = 3.0;
  /// As PipeOptions::tied_parameters: the trials' Pipes and Plan::pipe_options get them.
  std::vector<std::vector<std::string>> tied_parameters = {};
  /// What the runtime costs per action and per step beyond the layers (Note [Runtime
  /// overhead], runtime_overhead.h). Unset: plan(model, ...) measures it on its devices
  /// (~0.1-0.5 s); plan(profile, ...) takes none. Set it to reuse a measurement, or to {} to
  /// plan with the layers' times alone.
  std::optional<RuntimeOverhead> runtime_overhead = std::nullopt;
};

/// The sample mini-batch the plan is for, and the loss computed on the last stage.
struct PlanSample {
  Tensor input;   // [N, ...]: N is the mini-batch the Pipe will get
  Tensor target;  // [N, ...]
  LossFn loss;
};

/// A configuration the search weighed and did not choose, and why.
struct PlanAlternative {
  std::string config;          // "zb-h1 v1 chunks 8 balance 4|9 recompute 3"
  double step_time_us = 0;
  int64_t peak_bytes = 0;      // the largest device's
  bool fits = false;
  std::string why;             // "1.12x the plan's step" / "needs 13.2 MiB on cpu:0 ..."
};

struct Plan {
  std::string schedule_name;
  int virtual_stages = 1;
  int chunks = 1;
  std::vector<int> balance;               // layers per stage (p · v entries)
  std::vector<int> stage_worker;          // the schedule's placement
  int num_microbatches = 0;               // of the sample's batch
  int64_t rows = 0;                       // per micro-batch (the last may have fewer)
  Schedule schedule;                      // for the sample's batch, R actions included
  int recomputed = 0;                     // cells with an R
  double step_time_us = 0;                // the replayed step
  double bubble = 0;                      // the replayed bubble fraction
  Costs costs;                            // per stage, in microseconds: what was replayed
  RuntimeOverhead overhead;               // included in costs (per action) and step_time_us
  /// The cores the workers' threads shared in the replay (Note [Workers sharing cores],
  /// search.cc), each worker running threads_per_worker; 0: a processor per worker.
  int shared_cores = 0;
  int threads_per_worker = 1;
  std::vector<DevicePeak> peaks;          // per device
  bool exact_memory = false;              // peaks from measured stages (stage_probe.h)
  int64_t memory_cap_bytes = 0;
  bool deferred_batch_norm = false;       // PlanOptions'
  std::vector<std::string> devices;       // their names, for the text
  std::vector<PlanAlternative> alternatives;
  int candidates = 0;                     // configurations replayed
  bool profile_from_cache = false;        // the profile read from PlanOptions::cache
  /// The plans run before this one was chosen (PlanOptions::trials), in predicted order, this
  /// one among them; empty when none ran.
  std::vector<PlanTrial> trials;
  double trial_step_us = 0;               // this plan's measured step in the trials (0: none)
  bool trials_from_cache = false;         // the trials' steps read from PlanOptions::cache
  std::vector<std::vector<std::string>> tied_parameters;  // PlanOptions'
  double planning_seconds = 0;            // wall time of plan(), profile included

  /// PipeOptions for `devices` (one per worker) that run this plan, alone: balance, chunks,
  /// the schedule (name, virtual stages, placement, and its recomputes as RecomputeCells:
  /// a batch with fewer micro-batches, the short last one, recomputes the same cells of the
  /// micro-batches it has), deferred BatchNorm and tied parameters. Seed, threads per
  /// worker, worker CPUs and processes are the caller's to add (the defaults: as planned).
  PipeOptions pipe_options(const std::vector<Device>& devices) const;
  /// "1f1b, v 1, chunks 8, balance 4|9, 6 of 16 cells recomputed".
  std::string str() const;
  /// The replayed step drawn as text (schedule/ascii.h: to_ascii_scaled, or draw_replay of
  /// the replay on shared_cores when the workers shared them), `columns` units wide (about,
  /// for to_ascii_scaled's rounding), under a line naming the unit in microseconds: where
  /// each worker's F, B, I, W and R run and where it idles. Throws std::invalid_argument
  /// when columns < 1.
  std::string timeline(int columns = 48) const;
  /// str(), the predicted step time, bubble and peaks, the timeline, the alternatives with
  /// why each lost, and the trials' predicted and measured steps (the examples' --explain).
  std::string explain() const;
};

/// No configuration fits the cap. smallest_cap_bytes() is the least cap that one would fit.
class NoPlanFits : public std::runtime_error {
 public:
  NoPlanFits(const std::string& what, int64_t smallest_cap)
      : std::runtime_error(what), smallest_cap_(smallest_cap) {}
  int64_t smallest_cap_bytes() const { return smallest_cap_; }

 private:
  int64_t smallest_cap_;
};

/// Note [How the planner searches]. `model`'s parameters on one device of the devices' kind
/// (where it is profiled and probed, so its times and bytes are those of the devices the plan
/// is for; left as it was): a model built on the host is moved to a GPU before a plan for
/// GPUs. `devices`: one per worker, distinct. Runs the best few plans for a few steps each
/// (PlanOptions::trials; Note [Trying the best plans], trial.h). Leaves the model as it was:
/// on its device, parameters unwritten, buffers, .grad, modes and the caller's generator put
/// back (Note [Profiling leaves the module as it was], balance.h). Throws
/// std::invalid_argument for no devices, repeated devices, parameters on a device of another
/// kind (CPU vs CUDA), an undefined sample, a loss, an empty model, too few layers to cut for
/// the devices or an option out of range (naming the values), NoPlanFits when no
/// configuration fits the cap, and whatever profiling throws.
Plan plan(nn::Sequential& model, const PlanSample& sample, const std::vector<Device>& devices,
          const PlanOptions& options = {});

/// The same search from a profile alone (no model: stages are estimated, never measured,
/// every cut is allowed and no trial runs), for `num_devices` workers. Throws as plan().
Plan plan(const ModelProfile& profile, int num_devices, const PlanOptions& options = {});

/// "12.50 MiB", "3.0 KiB", "512 B"; and the parser of --memory-cap ("64MiB", "1.5GiB",
/// "4096", "500MB"; units B, KB, MB, GB (powers of 1000), KiB, MiB, GiB), throwing
/// std::invalid_argument naming the text.
std::string format_bytes(int64_t bytes);
int64_t parse_bytes(const std::string& text);

}  // namespace pipewright::pipeline
