#include "examples/fashion_mnist/auto_plan.h"

#include <algorithm>

#include "examples/fashion_mnist/progress.h"

namespace pipewright::examples {

pipeline::Plan plan_training(const TrainConfig& config, nn::Sequential& model,
                             const data::Dataset& train_set, const pipeline::LossFn& loss,
                             const std::vector<Device>& devices) {
  const int64_t rows = std::min<int64_t>(config.batch_size, train_set.size());
  const data::Batch first = train_set.slice(0, rows);
  return pipeline::plan(model, {first.inputs, first.targets, loss}, devices,
                        {.memory_cap_bytes = config.memory_cap,
                         .optimizer_state_factor = config.optimizer == "adam" ? 2.0 : 1.0,
                         .deferred_batch_norm = true,
                         .threads_per_worker = config.threads});
}

int microbatches(int64_t rows, int chunks) {
  const int64_t per = (rows + chunks - 1) / chunks;
  return static_cast<int>((rows + per - 1) / per);
}

void print_plan_against_run(std::ostream& out, const pipeline::Plan& plan,
                            const MeasuredRun& run, const std::vector<Device>& devices) {
  const double predicted_ms = plan.step_time_us / 1000.0;
  out << "plan vs run: step predicted " << format_fixed(predicted_ms, 2) << " ms, measured "
      << format_fixed(run.step_ms, 2) << " ms";
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
    out << "), with the optimizer's step " << format_bytes(run.peak_bytes[w]) << "\n";
  }
  out << std::flush;
}

}  // namespace pipewright::examples
