// The planner's search (Note [How the planner searches], planner.h), given where stage costs
// come from. plan() in planner.cc gathers these inputs from a model or a profile.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipeline/planner/cuts.h"
#include "pipeline/planner/model_profile.h"
#include "pipeline/planner/plan.h"
#include "pipeline/planner/stage_memory.h"

namespace pipewright::pipeline {

struct SearchInputs {
  const ModelProfile* profile = nullptr;
  int workers = 1;
  std::vector<std::string> device_names;  // one per worker
  /// The cores every worker's threads share when the devices are CPU devices of this
  /// process (hardware_threads()); 0 when each worker has a processor of its own (GPUs, a
  /// profile planned without devices). Note [Workers sharing cores], search.cc.
  int shared_cores = 0;
  std::vector<SkipSpan> skips;            // the model's (cuts.h); none for a bare profile
  /// The exact memory of a stage (memoized by the caller); empty: estimates are final.
  std::function<StageMemory(int first, int last, int64_t rows)> measure = {};
  /// balance_by_parameters for a number of stages; empty: not tried.
  std::function<std::vector<int>(int parts)> by_parameters = {};
  PlanOptions options;
};

/// The chunks the search tries for a mini-batch of `batch_rows` rows: options.chunks (empty:
/// 1, 2, 3, 4, 6, 8, 12, 16, 24, 32) up to batch_rows, the first of each micro-batch count
/// (torch.chunk's rule can make two chunks give the same micro-batches).
std::vector<int> chunk_candidates(const PlanOptions& options, int64_t batch_rows);

/// Runs the search and returns the plan, then up to count - 1 others worth running beside it
/// (the best of each other schedule, v and chunks predicted within options.trial_margin of
/// its step, fastest first; none under Objective::kPeakMemory); Plan::planning_seconds left 0.
/// Throws NoPlanFits when nothing fits and std::invalid_argument when no schedule, v and
/// chunks can be made for the workers and layers at all (naming them).
std::vector<Plan> search_plans(const SearchInputs& inputs, int count = 1);

}  // namespace pipewright::pipeline
