// The planner's file: a model's profile and the stages measured for it, as JSON, so a plan
// can be made again (another cap, other devices' count) without running the model.
//
//   {"version": 1, "profile": {...ModelProfile...}, "stages": [{...StageMemory...}, ...]}
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pipeline/planner/profile.h"
#include "pipeline/planner/stage_probe.h"

namespace pipewright::pipeline {

struct PlanCache {
  ModelProfile profile;
  std::vector<StageMemory> stages;
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
