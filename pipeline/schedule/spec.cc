#include "pipeline/schedule/spec.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "pipeline/schedule/registry.h"

namespace pipewright::pipeline {

std::vector<int64_t> microbatch_sizes(int64_t rows, int chunks) {
  if (rows < 0 || chunks < 1) {
    throw std::invalid_argument("microbatch_sizes: rows must be >= 0 and chunks >= 1, got rows " +
                                std::to_string(rows) + ", chunks " + std::to_string(chunks));
  }
  const int64_t per = (rows + chunks - 1) / chunks;
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < rows; start += per) sizes.push_back(std::min(per, rows - start));
  return sizes;
}

CheckpointPredicate recompute_predicate(const Recompute& recompute, int num_microbatches) {
  if (const Checkpoint* mode = std::get_if<Checkpoint>(&recompute)) {
    return checkpoint_predicate(*mode, num_microbatches);
  }
  if (num_microbatches < 1) {
    throw std::invalid_argument("recompute_predicate: num_microbatches must be >= 1, got " +
                                std::to_string(num_microbatches));
  }
  const auto& cells = std::get<RecomputeCells>(recompute).cells;
  return [cells](int s, int j) {
    if (s < 0 || static_cast<size_t>(s) >= cells.size()) return false;
    const auto& row = cells[static_cast<size_t>(s)];
    return j >= 0 && static_cast<size_t>(j) < row.size() && row[static_cast<size_t>(j)] != 0;
  };
}

Schedule build_schedule(const ScheduleSpec& spec, int num_workers, int num_microbatches) {
  Schedule schedule = make_schedule(spec.name, num_workers, num_microbatches,
                                    spec.virtual_stages);
  if (const auto* cells = std::get_if<RecomputeCells>(&spec.recompute)) {
    if (static_cast<int>(cells->cells.size()) != schedule.num_stages) {
      throw std::invalid_argument(
          "ScheduleSpec: RecomputeCells has " + std::to_string(cells->cells.size()) +
          " rows, schedule '" + spec.name + "' has " + std::to_string(schedule.num_stages) +
          " stages (one row per stage)");
    }
  }
  return with_recompute(schedule, recompute_predicate(spec.recompute, num_microbatches));
}

std::string to_string(const ScheduleSpec& spec) {
  std::string text = spec.name;
  if (spec.virtual_stages != 1) text += " v" + std::to_string(spec.virtual_stages);
  if (const Checkpoint* mode = std::get_if<Checkpoint>(&spec.recompute)) {
    return text + ", recompute " + to_string(*mode);
  }
  int n = 0;
  for (const auto& row : std::get<RecomputeCells>(spec.recompute).cells) {
    for (char c : row) n += c != 0;
  }
  return text + ", recompute " + std::to_string(n) + " cell" + (n == 1 ? "" : "s");
}

}  // namespace pipewright::pipeline
