// --plan auto: the example's balance, schedule, chunks, virtual stages and recomputes chosen by
// pipeline::plan (pipeline/planner/planner.h) under --memory-cap (examples/common/plan_vs_run.h
// prints its predictions beside what the run measured).
#pragma once

#include <cstdint>
#include <vector>

#include "data/dataset.h"
#include "examples/common/config.h"
#include "nn/sequential.h"
#include "pipeline/planner/planner.h"
#include "pipeline/step.h"

namespace pipewright::examples {

/// The plan for `model` on `devices` (one per worker), profiled on the first mini-batch of
/// `train_set` with `loss` (or its profile read from config.plan_cache): config.memory_cap
/// per device (0: none), Adam's or SGD's optimizer state, deferred BatchNorm and
/// config.threads as train() runs them. Throws what pipeline::plan throws (NoPlanFits naming
/// the smallest cap that fits).
pipeline::Plan plan_training(const TrainConfig& config, nn::Sequential& model,
                             const data::Dataset& train_set, const pipeline::LossFn& loss,
                             const std::vector<Device>& devices);

}  // namespace pipewright::examples
