#include "pipeline/schedule/ascii.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace pipewright::pipeline {
namespace {

bool whole(double x) { return std::abs(x - std::round(x)) < 1e-9; }

// Costs of the kinds the schedule uses must be whole time units (one column each).
void check_whole(const Schedule& schedule, const Costs& costs) {
  std::vector<StageCosts> all = costs.per_stage;
  if (all.empty()) all.push_back(costs.uniform);
  for (const auto& list : schedule.actions) {
    for (const Action& a : list) {
      for (const StageCosts& c : all) {
        if (!whole(c.of(a.kind))) {
          throw std::invalid_argument(std::string("to_ascii: the cost of ") + action_letter(a.kind) +
                                      " must be a whole number of time units (got " +
                                      std::to_string(c.of(a.kind)) + ")");
        }
      }
    }
  }
  if (!whole(costs.comm_latency)) {
    throw std::invalid_argument("to_ascii: comm_latency must be a whole number of time units (got " +
                                std::to_string(costs.comm_latency) + ")");
  }
  if (!whole(costs.wake_latency)) {
    throw std::invalid_argument("to_ascii: wake_latency must be a whole number of time units (got " +
                                std::to_string(costs.wake_latency) + ")");
  }
}

}  // namespace

std::string to_ascii(const Schedule& schedule, const Costs& costs) {
  check_whole(schedule, costs);
  return draw_replay(schedule, replay_schedule(schedule, costs), 1.0);
}

std::string draw_replay(const Schedule& schedule, const ScheduleReplay& replay, double unit) {
  if (!(unit > 0)) {
    throw std::invalid_argument("draw_replay: unit must be > 0, got " + std::to_string(unit));
  }
  const int p = schedule.num_workers;
  if (static_cast<int>(replay.timeline.size()) != p) {
    throw std::invalid_argument("draw_replay: the replay has " +
                                std::to_string(replay.timeline.size()) +
                                " workers, the schedule " + std::to_string(p));
  }
  // An action covers the columns its start and end round to, at least one unless it takes
  // no time.
  const auto column = [unit](double t) { return static_cast<int>(std::lround(t / unit)); };
  const auto last_column = [&column](const TimedAction& t) {
    return t.end > t.start ? std::max(column(t.start) + 1, column(t.end)) : column(t.start);
  };
  int columns = column(replay.makespan);
  for (const auto& list : replay.timeline) {
    for (const TimedAction& t : list) columns = std::max(columns, last_column(t));
  }

  // vstage[s]: position of stage s among its worker's stages (0 without interleaving).
  std::vector<int> vstage(schedule.num_stages, 0);
  bool interleaved = false;
  for (int w = 0; w < p; ++w) {
    const std::vector<int> stages = schedule.stages_of(w);
    for (size_t c = 0; c < stages.size(); ++c) vstage[stages[c]] = static_cast<int>(c);
    interleaved = interleaved || stages.size() > 1;
  }
  auto label = [&](const Action& a) {
    std::string text = action_letter(a.kind) + std::to_string(a.microbatch);
    if (interleaved) text += static_cast<char>('a' + vstage[a.stage] % 26);
    return text;
  };

  std::vector<std::vector<std::string>> grid(p, std::vector<std::string>(columns, "."));
  size_t width = 1;
  for (int w = 0; w < p; ++w) {
    for (const TimedAction& t : replay.timeline[w]) {
      const std::string text = label(t.action);
      width = std::max(width, text.size());
      for (int c = column(t.start); c < last_column(t); ++c) grid[w][c] = text;
    }
  }

  const std::string last_name = "worker " + std::to_string(p - 1);
  std::string out;
  for (int w = 0; w < p; ++w) {
    std::string line = "worker " + std::to_string(w);
    line.resize(last_name.size() + 2, ' ');
    for (int c = 0; c < columns; ++c) {
      std::string cell = grid[w][c];
      cell.resize(width + 1, ' ');
      line += cell;
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }
  return out;
}

std::string to_ascii_scaled(const Schedule& schedule, const Costs& costs, int columns,
                            double* unit) {
  if (columns < 1) {
    throw std::invalid_argument("to_ascii_scaled: columns must be >= 1, got " +
                                std::to_string(columns));
  }
  const double makespan = replay_schedule(schedule, costs).makespan;
  const double u = makespan > 0 ? makespan / columns : 1.0;
  if (unit != nullptr) *unit = u;
  const auto units = [u](double x) { return x > 0 ? std::max(1.0, std::round(x / u)) : 0.0; };
  const auto scaled = [&units](const StageCosts& c) {
    return StageCosts{.forward = units(c.forward),
                      .backward = units(c.backward),
                      .backward_input = units(c.backward_input),
                      .backward_weight = units(c.backward_weight),
                      .recompute = units(c.recompute)};
  };
  Costs whole_units;
  whole_units.uniform = scaled(costs.uniform);
  for (const StageCosts& c : costs.per_stage) whole_units.per_stage.push_back(scaled(c));
  whole_units.comm_latency = costs.comm_latency > 0 ? std::round(costs.comm_latency / u) : 0.0;
  whole_units.wake_latency = costs.wake_latency > 0 ? std::round(costs.wake_latency / u) : 0.0;
  whole_units.wake_after = costs.wake_after / u;
  return to_ascii(schedule, whole_units);
}

}  // namespace pipewright::pipeline
