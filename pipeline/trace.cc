#include "pipeline/trace.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "pipeline/schedule/deps.h"
#include "pipeline/schedule/validate.h"

namespace pipewright::pipeline {

namespace {

constexpr int kSendsThread = 1000;  // a tid no stage uses

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

}  // namespace

std::string TraceTransfer::name() const {
  std::string s = skip.empty() ? (gradient ? "grad " : "act ")
                               : (gradient ? "portal grad " + skip + " " : "portal " + skip + " ");
  return s + std::to_string(from_stage) + "->" + std::to_string(to_stage) + " mb " +
         std::to_string(microbatch);
}

Trace Trace::replayed(const Schedule& schedule, const Costs& costs,
                       double microseconds_per_unit) {
  if (!(microseconds_per_unit > 0)) {
    throw std::invalid_argument("Trace::replayed: microseconds_per_unit must be > 0 (got " +
                                std::to_string(microseconds_per_unit) + ")");
  }
  const ScheduleReplay sim = replay_schedule(schedule, costs);
  Trace trace(schedule.num_workers);
  trace.replayed_ = true;
  trace.replayed_schedule_ = schedule.name;
  for (int w = 0; w < schedule.num_workers; ++w) {
    for (const TimedAction& t : sim.timeline[static_cast<size_t>(w)]) {
      trace.add(TraceEvent{.worker = w,
                           .stage = t.action.stage,
                           .kind = t.action.kind,
                           .microbatch = t.action.microbatch,
                           .start_us = t.start * microseconds_per_unit,
                           .end_us = t.end * microseconds_per_unit});
    }
  }
  return trace;
}

Trace Trace::from_chrome_json(std::string_view text) {
  using nlohmann::json;
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("Trace::from_chrome_json: not JSON: ") + e.what());
  }
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    throw std::invalid_argument("Trace::from_chrome_json: no \"traceEvents\" array (not a Chrome trace)");
  }
  Trace trace;
  int workers = 0;
  const json& events = doc["traceEvents"];
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    if (!e.is_object() || e.value("ph", "") != "X" || e.value("tid", 0) == kSendsThread) continue;
    const std::string cat = e.value("cat", "");
    if (cat == "send" || cat == "portal") continue;
    auto fail = [&](const std::string& what) {
      return std::invalid_argument("Trace::from_chrome_json: event " + std::to_string(i) + " (" +
                                   e.dump().substr(0, 120) + "): " + what);
    };
    ActionKind kind{};
    bool known = false;
    for (ActionKind k : {ActionKind::kForward, ActionKind::kRecompute, ActionKind::kBackward,
                         ActionKind::kBackwardInput, ActionKind::kBackwardWeight}) {
      if (cat == category(k)) kind = k, known = true;
    }
    if (!known) throw fail("unknown category '" + cat + "'");
    const json* args = e.contains("args") ? &e["args"] : nullptr;
    if (!args || !args->is_object() || !(*args).contains("stage") || !(*args)["stage"].is_number_integer() ||
        !(*args).contains("microbatch") || !(*args)["microbatch"].is_number_integer()) {
      throw fail("args.stage and args.microbatch must be integers");
    }
    if (!e.contains("pid") || !e["pid"].is_number_integer() || !e.contains("ts") || !e["ts"].is_number() ||
        !e.contains("dur") || !e["dur"].is_number()) {
      throw fail("pid (an integer), ts and dur (numbers) are required");
    }
    TraceEvent ev{.worker = e["pid"].get<int>(),
                  .stage = (*args)["stage"].get<int>(),
                  .kind = kind,
                  .microbatch = (*args)["microbatch"].get<int>(),
                  .start_us = e["ts"].get<double>(),
                  .end_us = e["ts"].get<double>() + e["dur"].get<double>()};
    if (ev.worker < 0 || ev.stage < 0 || ev.microbatch < 0 || !(ev.end_us >= ev.start_us)) {
      throw fail("negative worker, stage, micro-batch or duration");
    }
    workers = std::max(workers, ev.worker + 1);
    trace.add(ev);
  }
  trace.num_workers_ = workers;
  if (doc.contains("otherData") && doc["otherData"].is_object()) {
    const json& other = doc["otherData"];
    trace.replayed_ = other.value("simulated", false);
    if (other.contains("schedule") && other["schedule"].is_string()) {
      trace.replayed_schedule_ = other["schedule"].get<std::string>();
    }
  }
  return trace;
}

namespace {

// Each worker's events in start order (ties: the earlier end first).
std::vector<std::vector<const TraceEvent*>> events_by_worker(const std::vector<TraceEvent>& events,
                                                             int num_workers) {
  std::vector<std::vector<const TraceEvent*>> out(static_cast<size_t>(num_workers));
  for (const TraceEvent& e : events) out[static_cast<size_t>(e.worker)].push_back(&e);
  for (auto& list : out) {
    std::stable_sort(list.begin(), list.end(), [](const TraceEvent* a, const TraceEvent* b) {
      return std::tie(a->start_us, a->end_us) < std::tie(b->start_us, b->end_us);
    });
  }
  return out;
}

}  // namespace

Schedule Trace::schedule(const std::string& name) const {
  if (events_.empty()) throw std::invalid_argument("Trace::schedule: the trace has no action events");
  Schedule s;
  s.name = name;
  s.num_workers = num_workers_;
  for (const TraceEvent& e : events_) {
    s.num_stages = std::max(s.num_stages, e.stage + 1);
    s.num_microbatches = std::max(s.num_microbatches, e.microbatch + 1);
  }
  s.stage_worker.assign(static_cast<size_t>(s.num_stages), -1);
  for (const TraceEvent& e : events_) {
    int& owner = s.stage_worker[static_cast<size_t>(e.stage)];
    if (owner != -1 && owner != e.worker) {
      throw std::invalid_argument("Trace::schedule: stage " + std::to_string(e.stage) + " ran on workers " +
                                  std::to_string(owner) + " and " + std::to_string(e.worker));
    }
    owner = e.worker;
  }
  for (const auto& list : events_by_worker(events_, num_workers_)) {
    std::vector<Action>& actions = s.actions.emplace_back();
    for (const TraceEvent* e : list) actions.push_back(Action{e->stage, e->kind, e->microbatch});
  }
  validate(s);
  return s;
}

ScheduleReplay Trace::timeline() const {
  const Schedule s = schedule();
  ScheduleReplay r;
  double first = events_.front().start_us;
  for (const TraceEvent& e : events_) first = std::min(first, e.start_us);
  for (const auto& list : events_by_worker(events_, num_workers_)) {
    std::vector<TimedAction>& row = r.timeline.emplace_back();
    double busy = 0;
    for (const TraceEvent* e : list) {
      row.push_back(TimedAction{Action{e->stage, e->kind, e->microbatch}, (e->start_us - first) / 1000.0,
                                (e->end_us - first) / 1000.0});
      r.makespan = std::max(r.makespan, row.back().end);
      busy += e->duration_us() / 1000.0;
    }
    r.busy.push_back(busy);
  }
  double idle = 0;
  for (double busy : r.busy) {
    r.idle.push_back(r.makespan - busy);
    idle += r.idle.back();
  }
  r.bubble_fraction = r.makespan > 0 ? idle / (num_workers_ * r.makespan) : 0.0;
  r.memory = peak_memory(s);
  return r;
}

double Trace::wall_us() const {
  if (events_.empty()) return 0;
  double first = events_.front().start_us;
  double last = events_.front().end_us;
  for (const TraceEvent& e : events_) {
    first = std::min(first, e.start_us);
    last = std::max(last, e.end_us);
  }
  return last - first;
}

double Trace::busy_us(int worker) const {
  double busy = 0;
  for (const TraceEvent& e : events_) {
    if (e.worker == worker) busy += e.duration_us();
  }
  return busy;
}

double Trace::bubble_fraction() const {
  const double wall = wall_us();
  if (wall <= 0 || num_workers_ <= 0) return 0;
  double idle = 0;
  for (int w = 0; w < num_workers_; ++w) idle += std::max(0.0, wall - busy_us(w));
  return idle / (num_workers_ * wall);
}

// Note [Replaying a step]
// How much idle time does the runtime itself add? Replay the schedule that ran with every
// action's own measured duration and free hand-offs: what remains idle in that replay is what
// the schedule and the actions' real durations force (the textbook bubble plus the stages'
// unequal costs); the measured bubble minus the replayed one is the runtime's share (waking a
// blocked worker, copying a message, bookkeeping between actions). Mean costs do not answer
// this: on a shared VM the workers' speeds drift during a step (one vCPU slower for a while,
// the first backward of a step slower than the rest), and averaging the durations first
// cancels the imbalance that idled the other worker, so a mean-cost replay predicts less
// idle time than any step had.
double Trace::replayed_bubble(const Schedule& schedule) const {
  std::map<std::tuple<int, ActionKind, int>, double> duration;
  for (const TraceEvent& e : events_) duration[{e.stage, e.kind, e.microbatch}] = e.duration_us();
  const Replay r = replay(schedule, [&](const Action& a) {
    const auto it = duration.find({a.stage, a.kind, a.microbatch});
    if (it == duration.end()) {
      throw std::invalid_argument("replayed_bubble: action " + a.str() + " of schedule '" +
                                  schedule.name + "' has no event in the trace");
    }
    return it->second;
  });
  if (!r.stuck.empty()) {
    throw std::invalid_argument("replayed_bubble: schedule '" + schedule.name +
                                "' does not replay to its end (worker " +
                                std::to_string(r.stuck.front().worker) + " stuck at " +
                                r.stuck.front().at.str() + ")");
  }
  double makespan = 0, busy = 0;
  for (size_t w = 0; w < r.end.size(); ++w) {
    for (size_t i = 0; i < r.end[w].size(); ++i) {
      makespan = std::max(makespan, r.end[w][i]);
      busy += r.end[w][i] - r.start[w][i];
    }
  }
  const double workers = static_cast<double>(schedule.num_workers);
  return makespan > 0 ? (workers * makespan - busy) / (workers * makespan) : 0.0;
}

std::string Trace::to_chrome_json() const {
  using nlohmann::json;
  json events = json::array();
  // Metadata first: a process per worker, a thread per (worker, stage) that has events, and
  // a "sends" thread per worker that sent something.
  std::set<std::pair<int, int>> threads;
  for (const TraceEvent& e : events_) threads.emplace(e.worker, e.stage);
  for (const TraceTransfer& t : transfers_) threads.emplace(t.worker, kSendsThread);
  for (int w = 0; w < num_workers_; ++w) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", w}, {"tid", 0},
                      {"args", {{"name", "worker " + std::to_string(w)}}}});
  }
  for (const auto& [worker, tid] : threads) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", worker}, {"tid", tid},
                      {"args", {{"name", tid == kSendsThread ? std::string("sends")
                                                             : "stage " + std::to_string(tid)}}}});
  }
  for (const TraceEvent& e : events_) {
    std::string name(1, action_letter(e.kind));
    name += std::to_string(e.microbatch);
    events.push_back({{"name", name},
                      {"cat", category(e.kind)},
                      {"ph", "X"},
                      {"ts", e.start_us},
                      {"dur", e.duration_us()},
                      {"pid", e.worker},
                      {"tid", e.stage},
                      {"args", {{"stage", e.stage}, {"microbatch", e.microbatch}}}});
  }
  for (const TraceTransfer& t : transfers_) {
    events.push_back({{"name", t.name()},
                      {"cat", t.skip.empty() ? "send" : "portal"},
                      {"ph", "X"},
                      {"ts", t.start_us},
                      {"dur", t.end_us - t.start_us},
                      {"pid", t.worker},
                      {"tid", kSendsThread},
                      {"args", {{"bytes", t.bytes}, {"microbatch", t.microbatch}}}});
  }
  json other = {{"bubble_fraction", bubble_fraction()},
                {"wall_us", wall_us()},
                {"simulated", replayed_}};
  if (replayed_) other["schedule"] = replayed_schedule_;
  json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}};
  return doc.dump();
}

void Trace::write_chrome_json(const std::string& path) const {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write trace to '" + path + "'");
  out << to_chrome_json();
  if (!out) throw std::runtime_error("cannot write trace to '" + path + "'");
}

double theoretical_bubble(int num_workers, int num_microbatches) {
  if (num_workers <= 0 || num_microbatches <= 0) return 0;
  return static_cast<double>(num_workers - 1) / (num_microbatches + num_workers - 1);
}

double micros_since(std::chrono::steady_clock::time_point epoch) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - epoch)
      .count();
}

}  // namespace pipewright::pipeline
