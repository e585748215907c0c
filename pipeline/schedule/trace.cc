#include "pipeline/schedule/trace.h"

#include <cstdio>
#include <stdexcept>

namespace pipewright::pipeline {
namespace {

const char* category(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward: return "forward";
    case ActionKind::kRecompute: return "recompute";
    case ActionKind::kBackward: return "backward";
    case ActionKind::kBackwardInput: return "backward_input";
    case ActionKind::kBackwardWeight: return "backward_weight";
  }
  return "unknown";
}

// Schedule names are generator names or "custom"; escape anyway so the JSON stays valid.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string to_chrome_trace(const Schedule& schedule, const Costs& costs, double microseconds_per_unit) {
  if (!(microseconds_per_unit > 0)) {
    throw std::invalid_argument("to_chrome_trace: microseconds_per_unit must be > 0 (got " +
                                std::to_string(microseconds_per_unit) + ")");
  }
  const Simulation sim = simulate(schedule, costs);
  std::string out = "{\"otherData\": {\"schedule\": " + json_string(schedule.name) + ", \"simulated\": true},\n";
  out += "\"traceEvents\": [\n";
  bool first = true;
  auto add = [&](const std::string& event) {
    out += first ? "  " : ",\n  ";
    out += event;
    first = false;
  };
  char buf[256];
  for (int w = 0; w < schedule.num_workers; ++w) {
    std::snprintf(buf, sizeof buf,
                  R"({"name": "thread_name", "ph": "M", "pid": 0, "tid": %d, "args": {"name": "worker %d"}})", w, w);
    add(buf);
  }
  for (int w = 0; w < schedule.num_workers; ++w) {
    for (const TimedAction& t : sim.timeline[w]) {
      std::snprintf(buf, sizeof buf,
                    R"({"name": "%c%d", "cat": "%s", "ph": "X", "pid": 0, "tid": %d, "ts": %.3f, "dur": %.3f, )"
                    R"("args": {"stage": %d, "microbatch": %d}})",
                    action_letter(t.action.kind), t.action.microbatch, category(t.action.kind), w,
                    t.start * microseconds_per_unit, (t.end - t.start) * microseconds_per_unit, t.action.stage,
                    t.action.microbatch);
      add(buf);
    }
  }
  out += "\n]}\n";
  return out;
}

}  // namespace pipewright::pipeline
