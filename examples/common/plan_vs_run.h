// --plan auto in the examples: what the run measured beside what the plan predicted (step time,
// bubble, each device's peak), and the peaks of train_step alone that the comparison needs.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "examples/common/pipeline_stats.h"
#include "pipeline/planner/planner.h"
#include "tensor/device.h"

namespace pipewright::examples {

/// Each device's peak within train_step alone -- what a plan predicts -- apart from what runs
/// between steps (the optimizer's step, evaluation). It resets the allocators' peak counters
/// before each step, which PipelineMeter reads at a stretch's end (pipeline_stats.h), so it
/// keeps the peaks between steps and gives them back with fold_stretch.
///
///   StepPeaks peaks(devices);
///   peaks.before_step(); pipe.train_step(...); if (steady) peaks.after_step();
///   PipelineStats stats = meter.finish(); peaks.fold_stretch(stats.peak_bytes);
class StepPeaks {
 public:
  explicit StepPeaks(std::vector<Device> devices);
  /// Keeps each device's peak so far in the stretch's and resets its counter.
  void before_step();
  /// The step's peaks join in_step(): after the steps to count (not the run's first, say).
  void after_step();
  /// peaks[d] = max(peaks[d], the stretch's peak of device d); starts a new stretch.
  void fold_stretch(std::vector<int64_t>& peaks);
  /// Per device: the largest peak within the steps counted.
  const std::vector<int64_t>& in_step() const { return in_step_; }

 private:
  std::vector<Device> devices_;
  std::vector<int64_t> stretch_, in_step_;
};

/// What the run measured, for the comparison.
struct MeasuredRun {
  double step_ms = 0;             // mean train_step wall time over the steady state's steps
  double bubble = 0;              // mean measured bubble fraction
  std::vector<int64_t> step_peak_bytes;  // per device: the largest peak within train_step
  std::vector<int64_t> peak_bytes;       // per device: the run's (the optimizer's step too)
};

/// What a run of `stretches` (pipeline_stats.h) measured: `step_ms`, the mean bubble over the
/// steady state (every stretch but the first, unless there is only one, as
/// print_steady_state), each device's largest peak over all stretches, and peaks.in_step().
MeasuredRun measured_run(double step_ms, const std::vector<PipelineStats>& stretches,
                         const StepPeaks& peaks);

/// "plan vs run: step predicted ... (... in the trials), measured ... | bubble ..." and a
/// "peak" line per device: predicted (with its bounds), measured within train_step and the
/// difference in bytes, and the run's peak with the optimizer's step.
void print_plan_against_run(std::ostream& out, const pipeline::Plan& plan,
                            const MeasuredRun& run, const std::vector<Device>& devices);

}  // namespace pipewright::examples
