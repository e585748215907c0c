// run_trials: Note [Trying the best plans] (trial.h).
#include "pipeline/planner/trial.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "pipeline/pipe.h"
#include "pipeline/median.h"
#include "pipeline/planner/profile.h"
#include "pipeline/profile_state.h"

namespace pipewright::pipeline {
namespace {

constexpr int kMostStepsPerRound = 20;

// A Sequential holding the model's own layers (the same modules, not copies).
nn::Sequential same_layers(const nn::Sequential& model) {
  nn::Sequential out;
  for (size_t i = 0; i < model.size(); ++i) out.push_back_shared(model.ptr(i));
  return out;
}

}  // namespace

std::vector<PlanTrial> run_trials(nn::Sequential& model, const Tensor& input,
                                  const Tensor& target, const LossFn& loss_fn,
                                  const std::vector<PipeOptions>& runs,
                                  const TrialOptions& options) {
  if (options.rounds < 1) {
    throw std::invalid_argument("run_trials: rounds must be >= 1 (got " +
                                std::to_string(options.rounds) + ")");
  }
  if (!(options.seconds >= 0) || !std::isfinite(options.seconds)) {
    throw std::invalid_argument("run_trials: seconds must be finite and >= 0 (got " +
                                std::to_string(options.seconds) + ")");
  }
  std::vector<PlanTrial> trials(runs.size());
  if (runs.empty()) return trials;
  const Device home = profile_device(model, input);
  const double round_share_us =
      1e6 * options.seconds / static_cast<double>(runs.size() * options.rounds);
  std::vector<std::vector<double>> times(runs.size());
  {
    ProfileStateGuard state(model);  // buffers, .grad, modes, generator: put back at the end
    try {
      for (int round = 0; round < options.rounds; ++round) {
        for (size_t k = 0; k < runs.size(); ++k) {
          if (!trials[k].error.empty()) continue;
          try {
            Pipe pipe(same_layers(model), runs[k]);
            const auto step_us = [&] {
              model.zero_grad();
              const auto start = std::chrono::steady_clock::now();
              pipe.train_step(input, target, loss_fn);
              return std::chrono::duration<double, std::micro>(
                         std::chrono::steady_clock::now() - start)
                  .count();
            };
            const double warm_up = step_us();
            const int steps = std::clamp(
                static_cast<int>(round_share_us / std::max(warm_up, 1.0)), 1, kMostStepsPerRound);
            for (int s = 0; s < steps; ++s) times[k].push_back(step_us());
          } catch (const std::exception& e) {
            trials[k].error = e.what();
            times[k].clear();
          }
        }
      }
    } catch (...) {
      model.zero_grad();
      model.to(home);
      throw;
    }
    // The trials' .grad are dropped rather than moved; then, before the guard copies the
    // buffers back and restores the caller's .grad, everything is on its device again.
    model.zero_grad();
    model.to(home);
  }
  for (size_t k = 0; k < runs.size(); ++k) {
    trials[k].measured_us = median(times[k]);
    trials[k].steps = static_cast<int>(times[k].size());
  }
  return trials;
}

}  // namespace pipewright::pipeline
