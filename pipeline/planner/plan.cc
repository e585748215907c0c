// Plan's text: its one-line summary, its timeline and --explain's report; the byte formats.
#include "pipeline/planner/plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "pipeline/planner/text.h"
#include "pipeline/schedule/ascii.h"

namespace pipewright::pipeline {
namespace {

// The cells of `schedule` that recompute: [stage][micro-batch].
std::set<std::pair<int, int>> recomputes(const Schedule& schedule) {
  std::set<std::pair<int, int>> cells;
  for (const auto& list : schedule.actions) {
    for (const Action& a : list) {
      if (a.kind == ActionKind::kRecompute) cells.insert({a.stage, a.microbatch});
    }
  }
  return cells;
}

}  // namespace

std::string Plan::str() const {
  const std::string b = balance_text(balance);
  const int cells = static_cast<int>(balance.size()) * num_microbatches;
  return schedule_name + ", " + std::to_string(virtual_stages) + " virtual stage" +
         (virtual_stages > 1 ? "s" : "") + " per worker, chunks " + std::to_string(chunks) +
         " (" + std::to_string(num_microbatches) + " micro-batches of " + std::to_string(rows) +
         " rows), balance " + b + ", " + std::to_string(recomputed) + " of " +
         std::to_string(cells) + " cells recomputed";
}

std::string Plan::timeline(int columns) const {
  double unit = 0;
  if (shared_cores == 0) {
    const std::string drawing = to_ascii_scaled(schedule, costs, columns, &unit);
    return "timeline, replayed (one column = " + fixed(unit, 1) + " us):\n" + drawing;
  }
  if (columns < 1) {
    throw std::invalid_argument("Plan::timeline: columns must be >= 1, got " +
                                std::to_string(columns));
  }
  // Actions last longer than their costs where workers share the cores: draw the replay.
  const ScheduleReplay replay =
      replay_on_shared_processors(schedule, costs, shared_cores, threads_per_worker);
  unit = replay.makespan > 0 ? replay.makespan / columns : 1.0;
  return "timeline, replayed with the workers sharing " + std::to_string(shared_cores) +
         " cores (one column = " + fixed(unit, 1) + " us):\n" +
         draw_replay(schedule, replay, unit);
}

std::string Plan::explain() const {
  std::string out = "plan: " + str() + "\n";
  out += "predicted: step " + fixed(step_time_us / 1000.0, 2) + " ms, bubble " +
         fixed(100 * bubble, 1) + " %, peak per device";
  for (size_t w = 0; w < peaks.size(); ++w) {
    out += (w == 0 ? " " : ", ") + devices[w] + " " + format_bytes(peaks[w].predicted);
    if (peaks[w].low != peaks[w].high) {
      out += " [" + format_bytes(peaks[w].low) + " .. " + format_bytes(peaks[w].high) + "]";
    }
  }
  out += memory_cap_bytes > 0 ? " (cap " + format_bytes(memory_cap_bytes) + ")" : "";
  out += exact_memory ? "; stages measured exactly\n" : "; memory estimated from the profile\n";
  if (overhead.per_action_us > 0 || overhead.per_step_us > 0 || overhead.wake_latency_us > 0) {
    out += "runtime overhead (measured): " + fixed(overhead.per_action_us, 1) +
           " us per action, " + fixed(overhead.per_step_us, 1) + " us per step";
    if (overhead.wake_latency_us > 0) {
      out += ", " + fixed(overhead.wake_latency_us, 1) + " us to wake a worker idle over " +
             fixed(overhead.wake_after_us, 0) + " us";
    }
    out += "\n";
  }
  if (recomputed > 0) {
    out += "recomputed cells (stage: micro-batches):";
    std::map<int, std::string> by_stage;
    for (const auto& [s, j] : recomputes(schedule)) {
      by_stage[s] += (by_stage[s].empty() ? "" : ",") + std::to_string(j);
    }
    for (const auto& [s, list] : by_stage) out += " " + std::to_string(s) + ": " + list + ";";
    out += "\n";
  }
  out += timeline();
  out += "alternatives (" + std::to_string(candidates) + " configurations replayed):\n";
  for (const PlanAlternative& a : alternatives) {
    out += "  " + a.config + ": " + a.why + "\n";
  }
  if (!trials.empty()) {
    out += std::string("trials (the fastest measured is the plan; predicted -> measured step") +
           (trials_from_cache ? "; measured before, read from the cache" : "") + "):\n";
    for (const PlanTrial& t : trials) {
      const bool mine = t.config == str();
      out += std::string(mine ? "* " : "  ") + t.config + ": " +
             fixed(t.predicted_us / 1000.0, 2) + " ms -> " +
             (t.error.empty() ? fixed(t.measured_us / 1000.0, 2) + " ms (median of " +
                                    std::to_string(t.steps) + " steps)"
                              : "failed: " + t.error) +
             "\n";
    }
  }
  out += "planned in " + fixed(planning_seconds, 2) + " s" +
         (profile_from_cache ? ", the profile read from the cache" : "") + "\n";
  return out;
}

// ---- bytes ----

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (std::llabs(bytes) >= (int64_t{1} << 30)) return fixed(b / (1 << 30), 2) + " GiB";
  if (std::llabs(bytes) >= (int64_t{1} << 20)) return fixed(b / (1 << 20), 2) + " MiB";
  if (std::llabs(bytes) >= (int64_t{1} << 10)) return fixed(b / (1 << 10), 1) + " KiB";
  return std::to_string(bytes) + " B";
}

int64_t parse_bytes(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  static const std::map<std::string, double> units = {
      {"", 1},        {"B", 1},         {"KB", 1e3},       {"MB", 1e6},     {"GB", 1e9},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  auto it = units.find(unit);
  if (used == 0 || it == units.end() || !(value >= 0) || !std::isfinite(value)) {
    throw std::invalid_argument("'" + text + "' is not a size (a number and B, KB, MB, GB, "
                                "KiB, MiB or GiB, e.g. 64MiB)");
  }
  return std::llround(value * it->second);
}

}  // namespace pipewright::pipeline
