// Trials: the best few plans run for a few training steps each, so that the planner returns
// the fastest measured of plans it predicted close.
//
// Note [Trying the best plans]
// The replay predicts a step from the layers' profiled times and the runtime's measured
// overhead (Note [Runtime overhead]). What neither sees can reorder plans predicted within a
// few per cent: workers switched on and off cores they share, one stage's working set evicted
// by another's, a layer slower inside a step than alone. On this project's 2-core machine the
// GPT example's 32 micro-batches of one window each were predicted 5-10 % faster than 16 and
// ran 3-8 % slower (docs/BENCHMARKS.md, "The GPT example's plan against its run"). So plan()
// runs its pick and the best of each other (schedule, virtual stages, chunks) predicted near
// it (PlanOptions::trials, trial_margin) and returns the one with the least median step:
//
//   round 1: plan A warm-up, A timed steps | plan B warm-up, B timed steps | C ...
//   round 2: the same, rounds alternating the plans so that load that comes and goes falls
//            on all of them alike
//
// Each round builds a Pipe over the model's own layers with the plan's options (moving them
// to the plan's devices), runs one untimed step, then as many timed steps as the round's
// share of TrialOptions::seconds allows (at least one). Every step starts with no .grad, as
// a training loop's zero_grad() leaves it; no optimizer step runs, so no parameter is
// written. Afterwards the model is on its device again and as it was (Note [Profiling leaves
// the module as it was], balance.h: buffers, .grad, modes, the caller's generator). A plan
// whose trial throws (a GPU whose other tenants took memory) is dropped with what it threw.
#pragma once

#include <string>
#include <vector>

#include "nn/sequential.h"
#include "pipeline/pipe_options.h"
#include "pipeline/planner/plan.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/step.h"
#include "tensor/tensor.h"

namespace pipewright::pipeline {

struct TrialOptions {
  int rounds = 3;
  /// About how long all the trials take, warm-up steps apart, in seconds.
  double seconds = 3.0;
};

/// Note [Trying the best plans]: runs a Pipe of each of `runs` (a plan's PipeOptions,
/// Plan::pipe_options: schedule and recomputes included) on `model` (its parameters on one
/// device) with the sample `input` [N, ...] and `target` [N, ...] and `loss_fn`, and returns
/// one PlanTrial per run, in order, with measured_us, steps and error set (config and
/// predicted_us left for the caller); a run that throws gets what it threw as its error and
/// runs no more. Leaves the model as it was, on its device. Throws std::invalid_argument for
/// rounds < 1 or a negative or non-finite `seconds` (naming the value), and what
/// profile_device throws for a model on several devices.
std::vector<PlanTrial> run_trials(nn::Sequential& model, const Tensor& input,
                                  const Tensor& target, const LossFn& loss_fn,
                                  const std::vector<PipeOptions>& runs,
                                  const TrialOptions& options = {});

}  // namespace pipewright::pipeline
