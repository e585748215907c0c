#include "tools/explorer/explorer_api.h"

#include <algorithm>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline/schedule/ascii.h"
#include "pipeline/schedule/io.h"
#include "pipeline/schedule/registry.h"
#include "pipeline/schedule/replay.h"
#include "pipeline/schedule/spec.h"
#include "pipeline/schedule/svg.h"
#include "pipeline/trace.h"

namespace pipewright::explorer {
namespace {

using nlohmann::json;
using namespace pipewright::pipeline;

std::string kind_name(ActionKind kind) { return std::string(1, action_letter(kind)); }

// The request's integer field `key`, or `fallback` when absent.
int int_field(const json& request, const char* key, int fallback) {
  if (!request.contains(key)) return fallback;
  const json& value = request[key];
  if (!value.is_number_integer()) {
    throw std::invalid_argument(std::string("\"") + key + "\" must be an integer (got " + value.dump() + ")");
  }
  return value.get<int>();
}

StageCosts stage_costs(const json& costs, const StageCosts& defaults) {
  if (!costs.is_object()) throw std::invalid_argument("costs must be an object (got " + costs.dump() + ")");
  StageCosts out = defaults;
  const std::pair<const char*, double StageCosts::*> fields[] = {
      {"F", &StageCosts::forward},          {"B", &StageCosts::backward},
      {"I", &StageCosts::backward_input},   {"W", &StageCosts::backward_weight},
      {"R", &StageCosts::recompute}};
  for (const auto& [key, member] : fields) {
    if (!costs.contains(key)) continue;
    if (!costs[key].is_number()) {
      throw std::invalid_argument(std::string("cost ") + key + " must be a number (got " + costs[key].dump() + ")");
    }
    out.*member = costs[key].get<double>();
  }
  return out;
}

Costs read_costs(const json& request) {
  Costs costs;
  if (request.contains("costs")) costs.uniform = stage_costs(request["costs"], costs.uniform);
  if (request.contains("per_stage")) {
    const json& rows = request["per_stage"];
    if (!rows.is_array()) throw std::invalid_argument("\"per_stage\" must be an array of cost objects");
    for (const json& row : rows) costs.per_stage.push_back(stage_costs(row, costs.uniform));
  }
  if (request.contains("comm")) {
    if (!request["comm"].is_number()) throw std::invalid_argument("\"comm\" must be a number");
    costs.comm_latency = request["comm"].get<double>();
  }
  return costs;
}

Recompute read_recompute(const json& request) {
  if (!request.contains("recompute")) return Checkpoint::kNever;
  const json& r = request["recompute"];
  if (r.is_string()) return parse_checkpoint(r.get<std::string>());
  if (!r.is_array()) {
    throw std::invalid_argument("\"recompute\" must be a checkpoint mode or one array of 0/1 per stage (got " +
                                r.dump() + ")");
  }
  RecomputeCells cells;
  for (const json& row : r) {
    if (!row.is_array()) throw std::invalid_argument("\"recompute\": each stage's row must be an array of 0/1");
    std::vector<char>& out = cells.cells.emplace_back();
    for (const json& cell : row) {
      if (!cell.is_number_integer() && !cell.is_boolean()) {
        throw std::invalid_argument("\"recompute\": cells are 0 or 1 (got " + cell.dump() + ")");
      }
      out.push_back(cell.is_boolean() ? cell.get<bool>() : cell.get<int>() != 0);
    }
  }
  return cells;
}

int virtual_stages_of(const Schedule& s) {
  return s.num_workers > 0 ? s.num_stages / s.num_workers : 1;
}

json schedule_to_json(const Schedule& s) {
  json workers = json::array();
  for (const auto& list : s.actions) {
    json row = json::array();
    for (const Action& a : list) {
      row.push_back({{"stage", a.stage}, {"kind", kind_name(a.kind)}, {"mb", a.microbatch}});
    }
    workers.push_back(row);
  }
  return {{"name", s.name},        {"p", s.num_workers},         {"stages", s.num_stages},
          {"m", s.num_microbatches}, {"v", virtual_stages_of(s)}, {"stage_worker", s.stage_worker},
          {"actions", workers}};
}

json replay_to_json(const ScheduleReplay& r) {
  json timeline = json::array();
  for (const auto& list : r.timeline) {
    json row = json::array();
    for (const TimedAction& t : list) {
      row.push_back({{"stage", t.action.stage},
                     {"kind", kind_name(t.action.kind)},
                     {"mb", t.action.microbatch},
                     {"start", t.start},
                     {"end", t.end}});
    }
    timeline.push_back(row);
  }
  return {{"makespan", r.makespan}, {"bubble", r.bubble_fraction}, {"busy", r.busy}, {"idle", r.idle},
          {"timeline", timeline}};
}

json memory_to_json(const MemoryPeaks& m) {
  return {{"stage_activations", m.stage_activations},
          {"stage_checkpointed_inputs", m.stage_checkpointed_inputs},
          {"worker_activations", m.worker_activations},
          {"worker_checkpointed_inputs", m.worker_checkpointed_inputs}};
}

bool recomputes(const Schedule& s) {
  for (const auto& list : s.actions) {
    for (const Action& a : list) {
      if (a.kind == ActionKind::kRecompute) return true;
    }
  }
  return false;
}

Schedule read_schedule(const json& request) {
  if (request.contains("csv")) {
    if (!request["csv"].is_string()) throw std::invalid_argument("\"csv\" must be a string");
    return from_any_csv(request["csv"].get<std::string>(), "pasted");
  }
  if (!request.contains("schedule") || !request["schedule"].is_string()) {
    throw std::invalid_argument("the request names no \"schedule\" (a registered name) and gives no \"csv\"");
  }
  ScheduleSpec spec;
  spec.name = request["schedule"].get<std::string>();
  const int v = int_field(request, "v", 0);
  spec.virtual_stages = v > 0 ? v : find_schedule(spec.name).virtual_stages.min;
  spec.recompute = read_recompute(request);
  return build_schedule(spec, int_field(request, "p", 2), int_field(request, "m", 4));
}

// to_ascii draws whole time units only (it refuses a fractional message cost): null then.
json ascii_or_null(const Schedule& s, const Costs& costs) {
  try {
    return to_ascii(s, costs);
  } catch (const std::invalid_argument&) {
    return nullptr;
  }
}

std::string error_json(const std::string& message) { return json{{"ok", false}, {"error", message}}.dump(); }

}  // namespace

std::string schedules_json() {
  json rows = json::array();
  for (const ScheduleInfo& row : registered_schedules()) {
    rows.push_back({{"name", row.name},
                    {"description", row.description},
                    {"v_min", row.virtual_stages.min},
                    {"v_max", row.virtual_stages.max},
                    {"v_text", row.virtual_stages.str()},
                    {"placement", to_string(row.placement)},
                    {"splits_backward", row.splits_backward}});
  }
  return rows.dump();
}

std::string explore_json(std::string_view request_text) {
  try {
    const json request = json::parse(request_text);
    if (!request.is_object()) return error_json("the request must be a JSON object");
    const Schedule s = read_schedule(request);
    const Costs costs = read_costs(request);
    const ScheduleReplay r = replay_schedule(s, costs);
    const int p = s.num_workers, m = s.num_microbatches;
    json out = {{"ok", true},
                {"schedule", schedule_to_json(s)},
                {"replay", replay_to_json(r)},
                {"memory", memory_to_json(r.memory)},
                {"theoretical_bubble", static_cast<double>(p - 1) / (m + p - 1)},
                {"svg", to_svg(s, r)},
                {"ascii", ascii_or_null(s, costs)},
                {"csv", to_csv(s)},
                {"torch_csv", recomputes(s) ? json(nullptr) : json(to_torch_csv(s))}};
    return out.dump();
  } catch (const json::exception& e) {
    return error_json(std::string("not a JSON request: ") + e.what());
  } catch (const std::exception& e) {
    return error_json(e.what());
  }
}

std::string trace_json(std::string_view trace_text) {
  try {
    const Trace trace = Trace::from_chrome_json(trace_text);
    const Schedule s = trace.schedule("measured");
    const ScheduleReplay measured = trace.timeline();
    // Mean measured duration of each kind of action per stage, in milliseconds.
    std::vector<std::map<char, std::pair<double, int>>> sums(static_cast<size_t>(s.num_stages));
    for (const TraceEvent& e : trace.events()) {
      auto& [total, count] = sums[static_cast<size_t>(e.stage)][action_letter(e.kind)];
      total += e.duration_us() / 1000.0;
      ++count;
    }
    json mean = json::array();
    for (const auto& stage : sums) {
      json row = json::object();
      for (const char k : {'F', 'B', 'I', 'W', 'R'}) {
        const auto it = stage.find(k);
        row[std::string(1, k)] = it == stage.end() ? 0.0 : it->second.first / it->second.second;
      }
      mean.push_back(row);
    }
    json measured_json = replay_to_json(measured);
    measured_json["unit"] = "ms";
    json out = {{"ok", true},
                {"schedule", schedule_to_json(s)},
                {"measured", measured_json},
                {"replayed_bubble", trace.replayed_bubble(s)},
                {"mean_costs", mean},
                {"memory", memory_to_json(measured.memory)},
                {"svg", to_svg(s, measured, "ms")},
                {"csv", to_csv(s)}};
    return out.dump();
  } catch (const std::exception& e) {
    return error_json(e.what());
  }
}

}  // namespace pipewright::explorer
