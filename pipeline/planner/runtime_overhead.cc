// measure_runtime_overhead: Note [Runtime overhead] (runtime_overhead.h).
#include "pipeline/planner/runtime_overhead.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule/generators.h"
#include "pipeline/schedule/replay.h"
#include "pipeline/worker.h"
#include "tensor/generator.h"

namespace pipewright::pipeline {
namespace {

constexpr int64_t kWidth = 8;  // one row per micro-batch: the pipe's chunks is m2
constexpr int kFew = 2, kMany = 16;  // m1, m2
constexpr int kWarmup = 3, kTimed = 9;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median wall time of a train_step of `pipe` with m micro-batches, in microseconds.
double step_us(Pipe& pipe, int m, Generator& g) {
  const Tensor x = Tensor::randn({m, kWidth}, g);
  const Tensor y = Tensor::zeros({m, kWidth});
  const LossFn mse = [](const Tensor& out, const Tensor& target) {
    return nn::mse_loss(out, target);
  };
  const Schedule schedule = one_f_one_b(pipe.num_stages(), m);
  std::vector<double> times;
  for (int k = 0; k < kWarmup + kTimed; ++k) {
    const auto start = std::chrono::steady_clock::now();
    pipe.train_step(x, y, mse, {.custom_schedule = schedule});
    const double us = std::chrono::duration<double, std::micro>(
                          std::chrono::steady_clock::now() - start)
                          .count();
    if (k >= kWarmup) times.push_back(us);
  }
  return median(times);
}

}  // namespace

RuntimeOverhead measure_runtime_overhead(const std::vector<Device>& devices,
                                         int threads_per_worker) {
  check_one_device_per_worker("measure_runtime_overhead", devices);
  const int p = static_cast<int>(devices.size());
  Generator g(0);
  nn::Sequential model;
  {
    GeneratorGuard guard(g);
    for (int s = 0; s < p; ++s) model.push_back(nn::Linear(kWidth, kWidth));
  }
  PipeOptions options;
  options.balance.assign(static_cast<size_t>(p), 1);
  options.devices = devices;
  options.chunks = kMany;  // a batch of m rows: m micro-batches of one row
  options.checkpoint = Checkpoint::kNever;
  options.schedule = "1f1b";
  options.threads_per_worker = threads_per_worker;
  Pipe pipe(std::move(model), options);

  const double few = step_us(pipe, kFew, g), many = step_us(pipe, kMany, g);
  const double units_few = replay_schedule(one_f_one_b(p, kFew), Costs::unit(1, 1)).makespan;
  const double units_many = replay_schedule(one_f_one_b(p, kMany), Costs::unit(1, 1)).makespan;
  RuntimeOverhead o;
  o.per_action_us = std::max(0.0, (many - few) / (units_many - units_few));
  o.per_step_us = std::max(0.0, few - o.per_action_us * units_few);
  return o;
}

}  // namespace pipewright::pipeline
