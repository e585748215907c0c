// What the planner returns and takes (planner.h's plan() makes it): Plan, PlanOptions and the
// types inside them, apart from the model, tensors and runtime, so the pure search (search.h:
// no model, only a profile and the schedule library) and the measuring half (planner.h:
// profile, probes, trials) read one set of types. Note [How the planner searches] is in
// planner.h.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/precision_kind.h"
#include "pipeline/planner/memory_replay.h"
#include "pipeline/schedule/replay.h"
#include "pipeline/schedule/schedule.h"

namespace pipewright {
struct Device;
}  // namespace pipewright

namespace pipewright::pipeline {

struct PipeOptions;

/// What the runtime costs beyond the layers (Note [Runtime overhead], runtime_overhead.h, which
/// measures it).
struct RuntimeOverhead {
  double per_action_us = 0;  // added to each F, B, I, W and R
  double per_step_us = 0;    // added once to the step
  double wake_latency_us = 0;  // Note [Waking an idle worker]: added to an action's start ...
  double wake_after_us = 0;    // ... when its worker waited longer than this for it
};

/// One plan's trial, as Plan::trials lists it.
struct PlanTrial {
  std::string config;        // Plan::str() of the plan run
  double predicted_us = 0;   // its Plan::step_time_us
  double measured_us = 0;    // the median wall time of its timed train_steps; 0 when it threw
  int steps = 0;             // timed steps, over all rounds
  std::string error;         // what the trial threw, if it did
};

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
  /// As PipeOptions::precision (Note [The precision policy], autograd/precision.h): the
  /// profile, the stage probes and the trials run under it, so a bf16 or fp16 plan is timed
  /// and measured as it will run (16-bit products, working copies, 16-bit messages), and
  /// Plan::pipe_options carries it.
  autograd::Precision precision = autograd::Precision::kFloat32;
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
  autograd::Precision precision = autograd::Precision::kFloat32;  // PlanOptions'
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

  /// PipeOptions for `devices` (one per worker) that run this plan, alone (defined with the
  /// measuring half, planner.cc; include pipeline/planner/planner.h to call it): balance, chunks,
  /// the schedule (name, virtual stages, placement, and its recomputes as RecomputeCells:
  /// a batch with fewer micro-batches, the short last one, recomputes the same cells of the
  /// micro-batches it has), deferred BatchNorm, precision and tied parameters. Seed, threads per
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

/// "12.50 MiB", "3.0 KiB", "512 B"; and the parser of --memory-cap ("64MiB", "1.5GiB",
/// "4096", "500MB"; units B, KB, MB, GB (powers of 1000), KiB, MiB, GiB), throwing
/// std::invalid_argument naming the text.
std::string format_bytes(int64_t bytes);
int64_t parse_bytes(const std::string& text);

}  // namespace pipewright::pipeline
