#include "pipeline/trace.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace pipewright::pipeline {

namespace {
constexpr int kSendsThread = 1000;  // a tid no stage uses
}  // namespace

std::string TraceTransfer::name() const {
  std::string s = skip.empty() ? (gradient ? "grad " : "act ")
                               : (gradient ? "portal grad " + skip + " " : "portal " + skip + " ");
  return s + std::to_string(from_stage) + "->" + std::to_string(to_stage) + " mb " +
         std::to_string(microbatch);
}

void Trace::append(const Trace& other) {
  num_workers_ = std::max(num_workers_, other.num_workers_);
  events_.insert(events_.end(), other.events_.begin(), other.events_.end());
  transfers_.insert(transfers_.end(), other.transfers_.begin(), other.transfers_.end());
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

std::string Trace::to_chrome_json() const {
  using nlohmann::json;
  json events = json::array();
  for (int w = 0; w < num_workers_; ++w) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", w}, {"tid", 0},
                      {"args", {{"name", "worker " + std::to_string(w)}}}});
  }
  for (const TraceEvent& e : events_) {
    const std::string letter(1, action_letter(e.kind));
    std::string name = letter;
    name += std::to_string(e.microbatch);
    events.push_back({{"name", name},
                      {"cat", letter},
                      {"ph", "X"},
                      {"ts", e.start_us},
                      {"dur", e.duration_us()},
                      {"pid", e.worker},
                      {"tid", e.stage},
                      {"args", {{"stage", e.stage}, {"microbatch", e.microbatch}}}});
  }
  std::vector<char> sends(static_cast<size_t>(num_workers_), 0);
  for (const TraceTransfer& t : transfers_) {
    if (t.worker >= 0 && t.worker < num_workers_ && !sends[static_cast<size_t>(t.worker)]) {
      sends[static_cast<size_t>(t.worker)] = 1;
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", t.worker},
                        {"tid", kSendsThread}, {"args", {{"name", "sends"}}}});
    }
    events.push_back({{"name", t.name()},
                      {"cat", t.skip.empty() ? "send" : "portal"},
                      {"ph", "X"},
                      {"ts", t.start_us},
                      {"dur", t.end_us - t.start_us},
                      {"pid", t.worker},
                      {"tid", kSendsThread},
                      {"args", {{"bytes", t.bytes}, {"microbatch", t.microbatch}}}});
  }
  json doc = {{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData", {{"bubble_fraction", bubble_fraction()}, {"wall_us", wall_us()}}}};
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
