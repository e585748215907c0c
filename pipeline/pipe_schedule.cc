#include "pipeline/pipe_schedule.h"

#include <stdexcept>
#include <string>

#include "pipeline/schedule/registry.h"

namespace pipewright::pipeline {

std::vector<std::vector<char>> recomputed_cells(const Schedule& schedule) {
  std::vector<std::vector<char>> cells(
      static_cast<size_t>(schedule.num_stages),
      std::vector<char>(static_cast<size_t>(schedule.num_microbatches), 0));
  for (const auto& list : schedule.actions) {
    for (const Action& a : list) {
      if (a.kind == ActionKind::kRecompute) cells.at(a.stage).at(a.microbatch) = 1;
    }
  }
  return cells;
}

Phases split_fill_drain(const Schedule& schedule) {
  Phases phases;
  for (size_t w = 0; w < schedule.actions.size(); ++w) {
    const auto& list = schedule.actions[w];
    size_t k = 0;
    while (k < list.size() && list[k].kind == ActionKind::kForward) ++k;
    phases.forward.emplace_back(list.begin(), list.begin() + static_cast<long>(k));
    phases.backward.emplace_back(list.begin() + static_cast<long>(k), list.end());
    for (const Action& a : phases.backward.back()) {
      if (a.kind == ActionKind::kForward) {
        throw std::invalid_argument("schedule '" + schedule.name + "' is not fill-drain: worker " +
                                    std::to_string(w) + " runs " + a.str() +
                                    " after a backward; run it with train_step");
      }
    }
  }
  return phases;
}

void check_virtual_stages(const std::string& schedule, int virtual_stages) {
  if (virtual_stages != 1) return;
  const ScheduleInfo row = find_schedule(schedule);
  // The interleaved family takes any v >= 2 (the V-shaped ones exactly 2, which make_schedule
  // says when asked for another).
  if (row.virtual_stages.allows(1) || row.virtual_stages.max != 0) return;
  std::string single;
  for (const ScheduleInfo& r : registered_schedules()) {
    if (r.virtual_stages.allows(1)) single += (single.empty() ? "'" : ", '") + r.name + "'";
  }
  throw std::invalid_argument(
      "schedule '" + schedule + "' interleaves several virtual stages per worker, but the " +
      "pipe has virtual_stages = 1: set PipeOptions::schedule.virtual_stages to 2 or more (balance " +
      "then has virtual_stages entries per worker), or use a schedule with one stage per " +
      "worker (" + single + ")");
}

void check_schedule_fits(const Schedule& schedule, int num_workers,
                         const std::vector<int>& stage_worker, int num_microbatches) {
  const std::string name = "schedule '" + schedule.name + "'";
  if (schedule.num_workers != num_workers) {
    throw std::invalid_argument(name + " has " + std::to_string(schedule.num_workers) +
                                " workers, the pipe has " + std::to_string(num_workers));
  }
  if (schedule.num_stages != static_cast<int>(stage_worker.size())) {
    throw std::invalid_argument(name + " has " + std::to_string(schedule.num_stages) +
                                " stages, the pipe has " + std::to_string(stage_worker.size()));
  }
  if (schedule.num_microbatches != num_microbatches) {
    throw std::invalid_argument(name + " has " + std::to_string(schedule.num_microbatches) +
                                " micro-batches, the mini-batch splits into " +
                                std::to_string(num_microbatches));
  }
  for (size_t s = 0; s < stage_worker.size() && s < schedule.stage_worker.size(); ++s) {
    if (schedule.stage_worker[s] != stage_worker[s]) {
      throw std::invalid_argument(name + " runs stage " + std::to_string(s) + " on worker " +
                                  std::to_string(schedule.stage_worker[s]) +
                                  ", the pipe on worker " + std::to_string(stage_worker[s]));
    }
  }
}

}  // namespace pipewright::pipeline
