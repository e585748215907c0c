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
#include "pipeline/planner/plan.h"
#include "pipeline/planner/profile.h"
#include "pipeline/step.h"

namespace pipewright::pipeline {

/// The sample mini-batch the plan is for, and the loss computed on the last stage.
struct PlanSample {
  Tensor input;   // [N, ...]: N is the mini-batch the Pipe will get
  Tensor target;  // [N, ...]
  LossFn loss;
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

}  // namespace pipewright::pipeline
