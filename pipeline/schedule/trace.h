// to_chrome_trace: a *simulated* timeline in the Chrome trace-event format, to open in
// chrome://tracing or https://ui.perfetto.dev next to a measured trace of the runtime
// (pipeline/trace.h writes those).
#pragma once

#include <string>

#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/simulator.h"

namespace pipewright::pipeline {

/// Simulates `schedule` with `costs` and returns a JSON object {"traceEvents": [...]}: one
/// complete event ("ph": "X") per action, named like "F3" with args {stage, microbatch}, on
/// thread `worker` of process 0, plus a thread_name event per worker ("worker 0", ...). One
/// simulated time unit lasts `microseconds_per_unit` in the trace. Throws what simulate()
/// throws, and std::invalid_argument if microseconds_per_unit <= 0.
std::string to_chrome_trace(const Schedule& schedule, const Costs& costs = Costs{},
                            double microseconds_per_unit = 1000.0);

}  // namespace pipewright::pipeline
