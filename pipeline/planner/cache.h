// The planner's file: a model's profile, the stages measured for it and the plans it ran
// (Note [Trying the best plans], trial.h), as JSON, so a plan can be made again (another cap,
// other devices' count) without running the model.
//
//   {"version": 2, "profile": {...ModelProfile...}, "stages": [{...StageMemory...}, ...],
//    "trials": [{"config": "...", "measured_us": 183400.0, "steps": 3}, ...]}
//
// "trials" may be missing (a file written before the trials): none then.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pipeline/planner/profile.h"
#include "pipeline/planner/stage_probe.h"
#include "pipeline/planner/trial.h"

namespace pipewright::pipeline {

struct PlanCache {
  ModelProfile profile;
  std::vector<StageMemory> stages;
  std::vector<PlanTrial> trials;  // config, measured_us and steps of each plan run
};

std::string to_json(const PlanCache& cache);
/// Throws std::invalid_argument naming the first missing or malformed field.
PlanCache plan_cache_from_json(const std::string& text);

/// Reads `path`; nullopt when the file does not exist or an older pipewright wrote it (an
/// older cache version: remade). Throws std::runtime_error naming the path when it exists but
/// cannot be read or parsed.
std::optional<PlanCache> read_plan_cache(const std::string& path);
/// Writes `path` (replacing it). Throws std::runtime_error naming the path on failure.
void write_plan_cache(const std::string& path, const PlanCache& cache);

}  // namespace pipewright::pipeline
