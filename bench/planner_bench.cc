// The planner's own time (pipeline/planner/planner.h): plan() from a layer profile of 100
// layers on 8 devices, every registered schedule, v up to 2, the default chunks candidates
// (1 to 32 of a 256-row batch), without a cap and under caps that force leaner cuts and
// recomputes. The profile is synthetic (no model runs), so this times the search alone:
// simulations, memory replays and recompute placements.
//
// Layers: a transformer-like rhythm of heavy and light layers (every fourth one three times
// the others' time, parameters and kept bytes).
//
//   plan/cap:none     no cap: the fastest configuration
//   plan/cap:PCT      a cap of PCT % of the no-cap plan's largest predicted device peak
//                     (60 %: below what any configuration reaches, a refusal)
//
// Counters: candidates (configurations replayed), step_us (the plan's predicted step),
// recomputed (cells with an R), peak_mib (the largest device's predicted peak); for a
// refusal, smallest_cap_mib (the cap it names).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>

#include "pipeline/planner/planner.h"

namespace {

using namespace pipewright::pipeline;

constexpr int kLayers = 100, kDevices = 8;
constexpr int64_t kBatch = 256;

ModelProfile synthetic_profile() {
  ModelProfile p;
  for (int i = 0; i < kLayers; ++i) {
    const double scale = i % 4 == 3 ? 3.0 : 1.0;
    LayerProfile l;
    l.name = "layer " + std::to_string(i);
    l.forward_us = {5 * scale, 0.8 * scale};
    l.backward_us = {10 * scale, 1.6 * scale};
    l.backward_input_us = {5 * scale, 0.8 * scale};
    l.backward_weight_us = {5 * scale, 0.8 * scale};
    l.parameter_bytes = static_cast<int64_t>(1 << 20) * static_cast<int64_t>(scale);
    l.output_bytes = {0, 4096};
    l.message_bytes = {0, 4096};  // float32: the output as it is
    l.activation_bytes = {0, 8192 * scale};
    l.forward_peak_bytes = {0, 12288 * scale};
    l.backward_peak_bytes = {0, 16384 * scale};
    p.layers.push_back(l);
  }
  p.loss.name = "loss";
  p.loss.forward_us = {2, 0.01};
  p.loss.backward_us = {2, 0.01};
  p.loss.output_bytes = {4, 0};
  p.input_bytes_per_row = 4096;
  p.target_bytes_per_row = 8;
  p.loss_bytes = 4;
  p.batch_rows = kBatch;
  p.copy_bytes_per_us = 5000;
  p.fingerprint = "planner_bench";
  return p;
}

int64_t largest_peak(const Plan& plan) {
  int64_t peak = 0;
  for (const DevicePeak& d : plan.peaks) peak = std::max(peak, d.predicted);
  return peak;
}

void BM_Plan(benchmark::State& state) {
  const ModelProfile profile = synthetic_profile();
  int64_t cap = 0;
  if (state.range(0) > 0) {
    cap = largest_peak(plan(profile, kDevices)) * state.range(0) / 100;
  }
  Plan last;
  int64_t refused_below = 0;
  for (auto _ : state) {
    try {
      last = plan(profile, kDevices, {.memory_cap_bytes = cap});
    } catch (const NoPlanFits& e) {  // timed too: the refusal searches as far
      refused_below = e.smallest_cap_bytes();
    }
  }
  if (refused_below > 0) {
    state.counters["smallest_cap_mib"] = static_cast<double>(refused_below) / (1 << 20);
    return;
  }
  state.counters["candidates"] = last.candidates;
  state.counters["step_us"] = last.step_time_us;
  state.counters["recomputed"] = last.recomputed;
  state.counters["peak_mib"] = static_cast<double>(largest_peak(last)) / (1 << 20);
}

}  // namespace

BENCHMARK(BM_Plan)->ArgName("cap")->Arg(0)->Arg(90)->Arg(75)->Arg(60)->Unit(benchmark::kMillisecond)
    ->Iterations(1);

BENCHMARK_MAIN();
