#include "pipeline/schedule/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipewright::pipeline {
namespace {

// Layout, in pixels.
constexpr double kMinUnit = 26;   // one time unit, at least
constexpr double kMinBox = 22;    // the shortest action is drawn at least this wide
constexpr double kRow = 30;       // one worker
constexpr double kBox = 24;       // box height
constexpr double kLeft = 74;      // worker names
constexpr double kTop = 34;       // title
constexpr double kLegend = 46;    // axis + legend below the rows

struct Style {
  const char* fill;
  const char* light;  // odd virtual stages of interleaved schedules
  const char* text;
};

Style style(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward: return {"#4e79a7", "#a5c0dd", "#ffffff"};
    case ActionKind::kBackward: return {"#59a14f", "#a9d5a1", "#ffffff"};
    case ActionKind::kBackwardInput: return {"#2a9d8f", "#9ad6ce", "#ffffff"};
    case ActionKind::kBackwardWeight: return {"#e9c46a", "#f6e2b3", "#333333"};
    case ActionKind::kRecompute: return {"#f28e2b", "#f9c794", "#ffffff"};
  }
  return {"#999999", "#cccccc", "#000000"};
}

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

// A box; with a `tooltip`, a <title> a browser shows on hover (the action, its stage and times).
std::string rect(double x, double y, double w, double h, const std::string& fill, const std::string& tooltip = "") {
  const std::string head = "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" +
                           num(h) + "\" rx=\"3\" fill=\"" + fill + "\" stroke=\"#ffffff\" stroke-width=\"1\"";
  return tooltip.empty() ? head + "/>\n" : head + "><title>" + tooltip + "</title></rect>\n";
}

// `s` with XML's special characters escaped: a schedule's name comes from a file or a user.
std::string escaped(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string text(double x, double y, const std::string& s, const std::string& fill, const char* anchor = "middle",
                 int size = 12) {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" fill=\"" + fill + "\" font-size=\"" +
         std::to_string(size) + "\" text-anchor=\"" + anchor + "\">" + escaped(s) + "</text>\n";
}

// The time axis's tick spacing: every 5 units for replays in unit costs (docs/img's pictures),
// else 1, 2 or 5 times a power of ten giving 5 to 50 ticks (measured steps in milliseconds).
double tick_step(double makespan) {
  if (makespan >= 10 && makespan <= 250) return 5;
  if (!(makespan > 0)) return 1;
  double step = std::pow(10.0, std::floor(std::log10(makespan / 5)));
  for (double k : {1.0, 2.0, 5.0, 10.0}) {
    if (makespan / (k * step) <= 50) return k * step;
  }
  return 10 * step;
}

}  // namespace

std::string to_svg(const Schedule& schedule, const Costs& costs) {
  return to_svg(schedule, replay_schedule(schedule, costs));
}

std::string to_svg(const Schedule& schedule, const ScheduleReplay& sim, std::string_view time_unit) {
  const int p = schedule.num_workers;
  if (sim.timeline.size() != static_cast<size_t>(p)) {
    throw std::invalid_argument("to_svg: the timeline has " + std::to_string(sim.timeline.size()) +
                                " rows for schedule '" + schedule.name + "' of " + std::to_string(p) + " workers");
  }
  std::vector<int> vstage(schedule.num_stages, 0);
  int v = 1;
  for (int w = 0; w < p; ++w) {
    const std::vector<int> stages = schedule.stages_of(w);
    for (size_t c = 0; c < stages.size(); ++c) vstage[stages[c]] = static_cast<int>(c);
    v = std::max(v, static_cast<int>(stages.size()));
  }

  // One time unit is wide enough that the shortest action still shows its number.
  double shortest = 1.0;
  int recomputed = 0;
  for (const auto& list : sim.timeline) {
    for (const TimedAction& t : list) {
      if (t.end > t.start) shortest = std::min(shortest, t.end - t.start);
      recomputed += t.action.kind == ActionKind::kRecompute;
    }
  }
  const double unit = std::max(kMinUnit, kMinBox / shortest);
  const double tick = tick_step(sim.makespan);
  const std::string suffix = time_unit.empty() ? "" : " " + std::string(time_unit);

  const double width = kLeft + sim.makespan * unit + 20;
  const double height = kTop + p * kRow + kLegend;
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" +
                    num(height) + "\" font-family=\"Helvetica, Arial, sans-serif\">\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  char title[240];
  std::snprintf(title, sizeof title, "%s%s: p=%d, m=%d%s, makespan %s%s, bubble %.1f%%", schedule.name.c_str(),
                recomputed > 0 ? " + recompute" : "", p, schedule.num_microbatches,
                v > 1 ? (", v=" + std::to_string(v)).c_str() : "", num(sim.makespan).c_str(), suffix.c_str(),
                100.0 * sim.bubble_fraction);
  out += text(kLeft, 20, title, "#222222", "start", 14);

  for (int w = 0; w < p; ++w) {
    const double y = kTop + w * kRow;
    out += text(kLeft - 8, y + kBox / 2 + 4, "worker " + std::to_string(w), "#222222", "end");
    out += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(y) + "\" width=\"" + num(sim.makespan * unit) +
           "\" height=\"" + num(kBox) + "\" fill=\"#f2f2f2\"/>\n";
    for (const TimedAction& t : sim.timeline[w]) {
      if (t.end <= t.start) continue;
      const Style st = style(t.action.kind);
      const bool odd_vstage = vstage[t.action.stage] % 2 == 1;
      const double x = kLeft + t.start * unit;
      const double bw = (t.end - t.start) * unit;
      const std::string tooltip = action_letter(t.action.kind) + std::to_string(t.action.microbatch) + " on stage " +
                                  std::to_string(t.action.stage) + ": " +
                                  num(t.start) + " to " + num(t.end) + suffix;
      out += rect(x, y, bw, kBox, odd_vstage ? st.light : st.fill, tooltip);
      out += text(x + bw / 2, y + kBox / 2 + 4, std::to_string(t.action.microbatch), odd_vstage ? "#222222" : st.text);
    }
  }

  // Time axis.
  const double axis_y = kTop + p * kRow;
  for (int i = 0; i * tick <= sim.makespan; ++i) {
    const double x = kLeft + i * tick * unit;
    out += "<line x1=\"" + num(x) + "\" y1=\"" + num(axis_y - 4) + "\" x2=\"" + num(x) + "\" y2=\"" +
           num(axis_y) + "\" stroke=\"#888888\"/>\n";
    out += text(x, axis_y + 12, num(i * tick), "#666666", "middle", 10);
  }

  // Legend: only the kinds the schedule uses.
  double lx = kLeft;
  const double ly = axis_y + 22;
  for (ActionKind k : {ActionKind::kForward, ActionKind::kRecompute, ActionKind::kBackward,
                       ActionKind::kBackwardInput, ActionKind::kBackwardWeight}) {
    bool used = false;
    for (const auto& list : schedule.actions) {
      for (const Action& a : list) used = used || a.kind == k;
    }
    if (!used) continue;
    static const char* const kNames[] = {"F forward", "R recompute", "B backward", "I input-grad", "W weight-grad"};
    out += rect(lx, ly, 14, 14, style(k).fill);
    out += text(lx + 20, ly + 11, kNames[static_cast<int>(k)], "#222222", "start", 11);
    lx += 110;
  }
  if (v > 1) {
    out += text(lx, ly + 11, "(lighter: the worker's 2nd virtual stage)", "#222222", "start", 11);
  }
  out += "</svg>\n";
  return out;
}

}  // namespace pipewright::pipeline
