#include "examples/common/plan_vs_run.h"

#include <algorithm>
#include <utility>

#include "examples/common/progress.h"
#include "tensor/allocator.h"

namespace pipewright::examples {

StepPeaks::StepPeaks(std::vector<Device> devices)
    : devices_(std::move(devices)), stretch_(devices_.size(), 0), in_step_(devices_.size(), 0) {}

void StepPeaks::before_step() {
  for (size_t d = 0; d < devices_.size(); ++d) {
    Allocator& a = allocator_for(devices_[d]);
    stretch_[d] = std::max(stretch_[d], a.peak());
    a.reset_peak();
  }
}

void StepPeaks::after_step() {
  for (size_t d = 0; d < devices_.size(); ++d) {
    in_step_[d] = std::max(in_step_[d], allocator_for(devices_[d]).peak());
  }
}

void StepPeaks::fold_stretch(std::vector<int64_t>& peaks) {
  for (size_t d = 0; d < peaks.size() && d < stretch_.size(); ++d) {
    peaks[d] = std::max(peaks[d], stretch_[d]);
  }
  std::fill(stretch_.begin(), stretch_.end(), 0);
}

MeasuredRun measured_run(double step_ms, const std::vector<PipelineStats>& stretches,
                         const StepPeaks& peaks) {
  MeasuredRun run;
  run.step_ms = step_ms;
  const size_t first = stretches.size() > 1 ? 1 : 0;
  for (size_t i = first; i < stretches.size(); ++i) {
    run.bubble += stretches[i].bubble / static_cast<double>(stretches.size() - first);
  }
  run.step_peak_bytes = peaks.in_step();
  run.peak_bytes.assign(run.step_peak_bytes.size(), 0);
  for (const PipelineStats& s : stretches) {
    for (size_t w = 0; w < run.peak_bytes.size() && w < s.peak_bytes.size(); ++w) {
      run.peak_bytes[w] = std::max(run.peak_bytes[w], s.peak_bytes[w]);
    }
  }
  return run;
}

void print_plan_against_run(std::ostream& out, const pipeline::Plan& plan,
                            const MeasuredRun& run, const std::vector<Device>& devices) {
  const double predicted_ms = plan.step_time_us / 1000.0;
  out << "plan vs run: step predicted " << format_fixed(predicted_ms, 2) << " ms";
  if (plan.trial_step_us > 0) {
    out << " (" << format_fixed(plan.trial_step_us / 1000.0, 2) << " ms in the trials)";
  }
  out << ", measured " << format_fixed(run.step_ms, 2) << " ms";
  if (predicted_ms > 0) out << " (" << format_fixed(run.step_ms / predicted_ms, 2) << "x)";
  out << " | bubble predicted " << format_fixed(plan.bubble, 3) << ", measured "
      << format_fixed(run.bubble, 3) << "\n";
  for (size_t w = 0; w < plan.peaks.size() && w < run.step_peak_bytes.size(); ++w) {
    const pipeline::DevicePeak& p = plan.peaks[w];
    out << "  peak " << devices[w].str() << ": predicted " << format_bytes(p.predicted);
    if (p.low != p.high) {
      out << " (" << format_bytes(p.low) << " .. " << format_bytes(p.high)
          << " as the messages arrive)";
    }
    const int64_t step = run.step_peak_bytes[w];
    out << ", measured in train_step " << format_bytes(step) << " (";
    if (step == p.predicted) {
      out << "exact";
    } else {
      out << (step > p.predicted ? "+" : "") << step - p.predicted << " bytes, "
          << (step >= p.low && step <= p.high ? "within" : "OUTSIDE") << " the bounds";
    }
    out << ")";
    if (w < run.peak_bytes.size()) {
      out << ", with the optimizer's step " << format_bytes(run.peak_bytes[w]);
    }
    out << "\n";
  }
  out << std::flush;
}

}  // namespace pipewright::examples
