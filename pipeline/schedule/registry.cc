#include "pipeline/schedule/registry.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "pipeline/schedule/generators/gpipe.h"
#include "pipeline/schedule/generators/interleaved_1f1b.h"
#include "pipeline/schedule/generators/interleaved_zero_bubble.h"
#include "pipeline/schedule/generators/looped_bfs.h"
#include "pipeline/schedule/generators/one_f_one_b.h"
#include "pipeline/schedule/generators/v_shape.h"
#include "pipeline/schedule/generators/zero_bubble.h"

namespace pipewright::pipeline {
namespace {

// A generator of one virtual stage per worker, as a row's generate (v is checked before).
template <Schedule (*generator)(int, int)>
Schedule ignore_v(int p, int m, int /*v*/) {
  return generator(p, m);
}

constexpr VirtualStages kOne{1, 1};
constexpr VirtualStages kTwoOrMore{2, 0};  // one stage per worker is plain 1F1B / GPipe
constexpr VirtualStages kTwo{2, 2};

// The table. One row per schedule; the generators' headers hold their papers and pictures.
std::vector<ScheduleInfo> builtin_schedules() {
  using P = StagePlacement;
  return {
      {"gpipe", ignore_v<gpipe>, kOne, P::kRoundRobin, false,
       "fill-drain: every forward, then every backward (GPipe)"},
      {"1f1b", ignore_v<one_f_one_b>, kOne, P::kRoundRobin, false,
       "one forward, one backward after a warm-up: stage s holds p-s micro-batches "
       "(PipeDream-Flush)"},
      {"interleaved-1f1b", interleaved_1f1b, kTwoOrMore, P::kRoundRobin, false,
       "1F1B over v virtual stages per worker: the bubble divided by v (Megatron-LM); "
       "m % p == 0"},
      {"zb-h1", ignore_v<zb_h1>, kOne, P::kRoundRobin, true,
       "zero bubble at 1F1B's cells: backward split into I and W, W's fill the cool-down"},
      {"zb-h2", ignore_v<zb_h2>, kOne, P::kRoundRobin, true,
       "zero bubble with up to 2p-1 micro-batches in flight"},
      {"interleaved-zb", interleaved_zero_bubble, kTwoOrMore, P::kRoundRobin, true,
       "interleaved 1F1B with I/W split (torch's ScheduleInterleavedZeroBubble)"},
      {"looped-bfs", static_cast<Schedule (*)(int, int, int)>(looped_bfs), kTwoOrMore, P::kRoundRobin, false,
       "breadth first: GPipe looped over v virtual stages (torch's ScheduleLoopedBFS)"},
      {"zb-v", ignore_v<zb_v>, kTwo, P::kV, true,
       "V-shaped zero bubble, two stages per worker, at 1F1B's memory"},
      {"dualpipev", ignore_v<dualpipev>, kTwo, P::kV, true,
       "DeepSeek's DualPipeV (V placement; F&B pairs run as F then B); m >= 2p"},
  };
}

struct Registry {
  std::mutex mutex;
  std::vector<ScheduleInfo> rows = builtin_schedules();
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += "'" + names[i] + "'";
  }
  return out;
}

// "schedule 'zb-h1' has one virtual stage per worker, so v must be 1 (got 2); ..."
[[noreturn]] void bad_v(const ScheduleInfo& row, int v) {
  const std::string quoted = "schedule '" + row.name + "'";
  const std::string got = " (got " + std::to_string(v) + ")";
  const VirtualStages& vs = row.virtual_stages;
  if (vs.min == 1 && vs.max == 1) {
    std::vector<std::string> any;
    for (const ScheduleInfo& r : registered_schedules()) {
      if (r.virtual_stages.max == 0) any.push_back(r.name);
    }
    throw std::invalid_argument(quoted + " has one virtual stage per worker, so v must be 1" +
                                got + "; use " + quoted_list(any) + " for v > 1");
  }
  if (row.placement == StagePlacement::kV && vs.min == 2 && vs.max == 2) {
    throw std::invalid_argument(quoted + " holds two stages per worker (a V), so v must be 2" +
                                got);
  }
  throw std::invalid_argument(quoted + " takes " + (vs.max == 0 ? "" : "v = ") + vs.str() +
                              " virtual stages per worker" + got);
}

}  // namespace

std::string to_string(StagePlacement placement) {
  return placement == StagePlacement::kV ? "V" : "round robin";
}

std::vector<int> place(StagePlacement placement, int p, int v) {
  return placement == StagePlacement::kV ? v_placement(p) : round_robin_placement(p, v);
}

int VirtualStages::clamp(int v) const {
  const int low = std::max(v, min);
  return max == 0 ? low : std::min(low, max);
}

std::string VirtualStages::str() const {
  if (max == 0) return "any v >= " + std::to_string(min);
  if (min == max) return std::to_string(min);
  return std::to_string(min) + ".." + std::to_string(max);
}

std::vector<ScheduleInfo> registered_schedules() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.rows;
}

std::vector<std::string> schedule_names() {
  std::vector<std::string> names;
  for (const ScheduleInfo& row : registered_schedules()) names.push_back(row.name);
  return names;
}

ScheduleInfo find_schedule(std::string_view name) {
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const ScheduleInfo& row : r.rows) {
      if (row.name == name) return row;
    }
  }
  std::string valid;
  for (const std::string& n : schedule_names()) valid += (valid.empty() ? "'" : ", '") + n + "'";
  throw std::invalid_argument("unknown schedule '" + std::string(name) + "' (valid: " + valid +
                              ")");
}

void register_schedule(ScheduleInfo info) {
  const std::string quoted = "register_schedule: '" + info.name + "'";
  if (info.name.empty()) throw std::invalid_argument("register_schedule: the name is empty");
  if (!info.generate) throw std::invalid_argument(quoted + " has no generator");
  const VirtualStages& vs = info.virtual_stages;
  if (vs.min < 1 || vs.max < 0 || (vs.max != 0 && vs.max < vs.min)) {
    throw std::invalid_argument(quoted + ": virtual_stages must have 1 <= min and max = 0 or " +
                                "max >= min (min: " + std::to_string(vs.min) +
                                ", max: " + std::to_string(vs.max) + ")");
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const ScheduleInfo& row : r.rows) {
    if (row.name == info.name) throw std::invalid_argument(quoted + " is already registered");
  }
  r.rows.push_back(std::move(info));
}

std::vector<int> schedule_placement(std::string_view name, int p, int v) {
  const ScheduleInfo row = find_schedule(name);
  if (!row.virtual_stages.allows(v)) bad_v(row, v);
  return place(row.placement, p, v);
}

Schedule make_schedule(std::string_view name, int p, int m, int v) {
  const ScheduleInfo row = find_schedule(name);
  if (!row.virtual_stages.allows(v)) bad_v(row, v);
  return row.generate(p, m, v);
}

std::string describe_schedules() {
  const std::vector<ScheduleInfo> rows = registered_schedules();
  size_t width = 0;
  for (const ScheduleInfo& row : rows) width = std::max(width, row.name.size());
  std::string out;
  for (const ScheduleInfo& row : rows) {
    out += "  " + row.name + std::string(width + 2 - row.name.size(), ' ') + row.description;
    if (row.virtual_stages.min != 1 || row.virtual_stages.max != 1) {
      out += " [v: " + row.virtual_stages.str() + "]";
    }
    out += "\n";
  }
  return out;
}

}  // namespace pipewright::pipeline
