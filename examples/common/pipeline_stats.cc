#include "examples/common/pipeline_stats.h"

#include <algorithm>
#include <cmath>

#include "examples/common/progress.h"

namespace pipewright::examples {
namespace {

// Across processes a rank's trace holds its own worker's actions only, timed from the start
// of its step: the fraction of that time the worker did not compute.
double local_idle_fraction(const pipeline::Trace& trace, int worker) {
  double end = 0;
  for (const pipeline::TraceEvent& e : trace.events()) end = std::max(end, e.end_us);
  return end > 0 ? 1.0 - trace.busy_us(worker) / end : 0.0;
}

}  // namespace

PipelineMeter::PipelineMeter(const std::vector<Device>& devices,
                             distributed::MpiProcesses* processes)
    : devices_(devices), processes_(processes), busy_us_(devices.size(), 0.0) {
  for (const Device& d : devices_) allocator_for(d).reset_peak();
}

void PipelineMeter::add(const pipeline::StepResult& step) {
  // A step replayed from a CUDA graph (--cuda-graphs) ran as one unit: it has no per-action
  // timings, so the bubble is the mean over the steps that have them.
  if (step.trace.events().empty()) {
    ++replayed_steps_;
    return;
  }
  if (processes_ != nullptr) {
    const int worker = processes_->worker();
    bubble_sum_ += local_idle_fraction(step.trace, worker);
    busy_us_[static_cast<size_t>(worker)] += step.trace.busy_us(worker);
  } else {
    bubble_sum_ += step.trace.bubble_fraction();
    replayed_sum_ += step.trace.replayed_bubble(step.schedule);
    for (size_t w = 0; w < busy_us_.size(); ++w) {
      busy_us_[w] += step.trace.busy_us(static_cast<int>(w));
    }
  }
  ++steps_;
}

PipelineStats PipelineMeter::finish() const {
  PipelineStats stats;
  const double steps = static_cast<double>(std::max<int64_t>(1, steps_));
  stats.bubble = steps_ > 0 ? bubble_sum_ / steps : std::nan("");
  stats.replayed_steps = replayed_steps_;
  stats.bubble_replayed = processes_ || steps_ == 0 ? std::nan("") : replayed_sum_ / steps;
  for (double b : busy_us_) stats.busy_ms.push_back(b / 1000.0 / steps);
  for (const Device& d : devices_) stats.peak_bytes.push_back(allocator_for(d).peak());
  if (processes_ != nullptr) {
    // Each rank knows its own stage's bubble and memory: the mean and the maxima over ranks.
    const int ranks = processes_->workers() * processes_->replicas();
    stats.bubble = processes_->sum_over_job(stats.bubble) / ranks;
    // A stage's busy time: the mean over the replicas running it.
    for (double& b : stats.busy_ms) b = processes_->sum_over_job(b) / processes_->replicas();
    std::vector<double> peaks(stats.peak_bytes.begin(), stats.peak_bytes.end());
    processes_->max_over_job(peaks);
    stats.peak_bytes.assign(peaks.begin(), peaks.end());
  }
  return stats;
}

std::string bubble_and_memory(const PipelineStats& stats, const std::vector<Device>& devices) {
  std::string out = " | bubble " +
                    (std::isnan(stats.bubble) ? std::string("n/a (graph replays)")
                                              : format_fixed(stats.bubble, 3)) +
                    " | peak mem";
  for (size_t s = 0; s < stats.peak_bytes.size(); ++s) {
    out += (s ? ", " : " ") + devices[s].str() + " " + format_bytes(stats.peak_bytes[s]);
  }
  if (stats.graph_pool_bytes > 0) {
    out += " (graph pool " + format_bytes(stats.graph_pool_bytes) + ")";
  }
  return out;
}

void print_steady_state(std::ostream& out, const std::vector<PipelineStats>& stretches,
                        const std::string& what, const std::vector<int64_t>& numbers,
                        const std::vector<Device>& devices) {
  if (stretches.empty()) return;
  const size_t first = stretches.size() > 1 ? 1 : 0;
  const double n = static_cast<double>(stretches.size() - first);
  std::vector<double> busy(stretches.front().busy_ms.size(), 0.0);
  double bubble = 0, replayed = 0;
  for (size_t i = first; i < stretches.size(); ++i) {
    for (size_t s = 0; s < busy.size(); ++s) busy[s] += stretches[i].busy_ms[s] / n;
    bubble += stretches[i].bubble / n;
    replayed += stretches[i].bubble_replayed / n;
  }
  out << "steady state (" << what << (first + 1 < stretches.size() ? "s " : " ")
      << numbers[first];
  if (first + 1 < stretches.size()) out << "-" << numbers.back();
  out << "): busy per step";
  for (size_t s = 0; s < busy.size(); ++s) {
    out << (s ? ", " : " ") << devices[s].str() << " " << format_fixed(busy[s], 2) << " ms";
  }
  if (busy.size() > 1) {  // one worker has no bubble to explain
    const auto [least, most] = std::minmax_element(busy.begin(), busy.end());
    out << " (least/most " << format_fixed(*most > 0 ? *least / *most : 1.0, 2) << ") | bubble "
        << (std::isnan(bubble) ? std::string("n/a (graph replays)") : format_fixed(bubble, 3));
    if (!std::isnan(replayed)) {
      out << ", replayed with the measured durations " << format_fixed(replayed, 3);
      if (replayed > 0) out << " (measured/replayed " << format_fixed(bubble / replayed, 2) << ")";
    }
  }
  out << "\n" << std::flush;
}

}  // namespace pipewright::examples
