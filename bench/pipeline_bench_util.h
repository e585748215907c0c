// Helpers shared by the pipeline benchmarks (pipe_bench, schedule_bench): measured action
// costs for the simulator.
//
// Note [Replaying a step]
// How much idle time does the runtime itself add? Replay the schedule that ran with every
// action's own measured duration (from the trace) and free hand-offs: what remains idle in
// that replay is what the schedule and the actions' real durations force; the measured bubble
// minus the replayed one is the runtime's share (waking a blocked worker, copying a message,
// bookkeeping between actions). Mean costs do not answer this: on a shared VM the workers'
// speeds drift during a step (one vCPU slower for a while, the first backward of a step
// slower than the rest), and averaging the durations first cancels the imbalance that idled
// the other worker, so a mean-cost simulation predicts less idle time than any step had.
// replayed_bubble() is the replay; MeasuredCosts gives the mean-cost simulation beside it.
#pragma once

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/deps.h"
#include "pipeline/schedule/simulator.h"
#include "pipeline/trace.h"

namespace pipewright::bench {

/// Sums the measured duration of each action kind on each (virtual) stage over any number of
/// runtime traces; costs() turns them into the simulator's per-stage costs (mean µs per
/// action). Kinds that never ran keep the simulator's defaults (they are not used).
class MeasuredCosts {
 public:
  void add(const pipeline::Trace& trace) {
    for (const pipeline::TraceEvent& e : trace.events()) {
      auto& [total, count] = sums_[{e.stage, e.kind}];
      total += e.duration_us();
      ++count;
    }
  }

  pipeline::Costs costs(int num_stages) const {
    pipeline::Costs costs;
    costs.per_stage.resize(static_cast<size_t>(num_stages));
    for (const auto& [key, value] : sums_) {
      const double mean = value.first / value.second;
      pipeline::StageCosts& c = costs.per_stage.at(static_cast<size_t>(key.first));
      switch (key.second) {
        case pipeline::ActionKind::kForward: c.forward = mean; break;
        case pipeline::ActionKind::kRecompute: c.recompute = mean; break;
        case pipeline::ActionKind::kBackward: c.backward = mean; break;
        case pipeline::ActionKind::kBackwardInput: c.backward_input = mean; break;
        case pipeline::ActionKind::kBackwardWeight: c.backward_weight = mean; break;
      }
    }
    return costs;
  }

 private:
  std::map<std::pair<int, pipeline::ActionKind>, std::pair<double, int>> sums_;
};

/// The bubble fraction of `schedule` replayed with each action's measured duration in `trace`
/// (one step of that schedule) and zero-cost hand-offs: Σ idle / (workers × makespan), like
/// Trace::bubble_fraction(). Note [Replaying a step]. Throws std::invalid_argument if an
/// action of the schedule is missing from the trace.
inline double replayed_bubble(const pipeline::Schedule& schedule, const pipeline::Trace& trace) {
  std::map<std::tuple<int, pipeline::ActionKind, int>, double> duration;
  for (const pipeline::TraceEvent& e : trace.events()) {
    duration[{e.stage, e.kind, e.microbatch}] = e.duration_us();
  }
  const pipeline::Replay r = pipeline::replay(schedule, [&](const pipeline::Action& a) {
    const auto it = duration.find({a.stage, a.kind, a.microbatch});
    if (it == duration.end()) {
      throw std::invalid_argument("replayed_bubble: " + a.str() + " is not in the trace");
    }
    return it->second;
  });
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

}  // namespace pipewright::bench
