// Helpers shared by the pipeline benchmarks (pipe_bench, schedule_bench): measured action
// costs for the replay.
//
// The replay of a step with its own durations is Trace::replayed_bubble (Note [Replaying a
// step] in pipeline/trace.cc); MeasuredCosts gives the mean-cost replay beside it.
#pragma once

#include <algorithm>
#include <map>
#include <utility>

#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/replay.h"
#include "pipeline/trace.h"

namespace pipewright::bench {

/// Sums the measured duration of each action kind on each (virtual) stage over any number of
/// runtime traces; costs() turns them into the replay's per-stage costs (mean µs per
/// action). Kinds that never ran keep the replay's defaults (they are not used).
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

}  // namespace pipewright::bench
