// measure_runtime_overhead: Note [Runtime overhead] (runtime_overhead.h).
#include "pipeline/planner/runtime_overhead.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/channel.h"
#include "pipeline/message_waiter.h"
#include "pipeline/pipe.h"
#include "pipeline/median.h"
#include "pipeline/planner/profile.h"
#include "pipeline/schedule/generators.h"
#include "pipeline/schedule/replay.h"
#include "pipeline/worker.h"
#include "pipeline/worker_cpus.h"
#include "tensor/generator.h"
#include "tensor/parallel.h"
#include "tensor/threads.h"

namespace pipewright::pipeline {
namespace {

constexpr int64_t kWidth = 8;  // one row per micro-batch: the pipe's chunks is m2
constexpr int kFew = 2, kMany = 16;  // m1, m2
constexpr int kWarmup = 3, kTimed = 9;

// The probe pipeline's loss.
Tensor mse(const Tensor& out, const Tensor& target) { return nn::mse_loss(out, target); }

struct StepTimes {
  double few_us, many_us;  // medians
};

// Median wall times of train_steps of `pipe` with kFew and kMany micro-batches, in
// microseconds. The two alternate step by step, so a burst of load from another process falls
// on both alike rather than on one of them (timed one after the other, a loaded moment under
// the kFew runs once made them slower than the kMany ones).
StepTimes step_times(Pipe& pipe, Generator& g) {
  std::vector<double> times[2];  // kFew, kMany
  const Tensor x[2] = {Tensor::randn({kFew, kWidth}, g), Tensor::randn({kMany, kWidth}, g)};
  const Tensor y[2] = {Tensor::zeros({kFew, kWidth}), Tensor::zeros({kMany, kWidth})};
  const Schedule schedule[2] = {one_f_one_b(pipe.num_stages(), kFew),
                                one_f_one_b(pipe.num_stages(), kMany)};
  for (int k = 0; k < kWarmup + kTimed; ++k) {
    for (int i = 0; i < 2; ++i) {
      const auto start = std::chrono::steady_clock::now();
      pipe.train_step(x[i], y[i], mse, {.schedule = schedule[i]});
      const double us = std::chrono::duration<double, std::micro>(
                            std::chrono::steady_clock::now() - start)
                            .count();
      if (k >= kWarmup) times[i].push_back(us);
    }
  }
  return {median(times[0]), median(times[1])};
}

// The mean time of one action's own layers in the measured pipeline (a one-row Linear, and
// on the last of p stages the loss), timed as the profile times layers: a plan counts those
// from its profile, so they are not the runtime's. About 2 us on this project's CPU (autograd's
// bookkeeping); on a GPU a Linear's host time (cuBLAS calls, launches) is most of it.
double layer_time_per_action(Device device, int p, int threads) {
  Generator g(1);
  nn::Sequential one;
  {
    GeneratorGuard guard(g);
    one.push_back(nn::Linear(kWidth, kWidth, true, {.device = device}));
  }
  const Tensor x = Tensor::randn({2, kWidth}, g), y = Tensor::zeros({2, kWidth});
  const ModelProfile profile =
      profile_model(one, x, y, mse, {.rows = {1, 2}, .threads = threads});
  const auto both = [](const LayerProfile& l) {
    return l.forward_us.at(1) + l.backward_us.at(1);
  };
  return (both(profile.layers[0]) + both(profile.loss) / p) / 2;
}

// Note [Waking an idle worker]: the waits a receiver is left in before each message.
constexpr double kWaitsUs[] = {20, 50, 100, 200, 400, 1000};
constexpr int kWakeRepetitions = 15;
constexpr double kNoDeepSleep = 2.0;  // us: a smaller difference is no deep sleep

using Clock = std::chrono::steady_clock;

// Keeps this thread's core busy for `us` microseconds, as a worker computing an action does.
void busy_for(double us) {
  const auto until = Clock::now() + std::chrono::duration<double, std::micro>(us);
  while (Clock::now() < until) {
  }
}

}  // namespace

WakeCosts measure_wake_costs() {
  Channel<Clock::time_point> to_receiver;
  Channel<int> back;  // the receiver is about to wait again
  std::vector<double> latency;
  // The receiver waits as a pipeline worker does (Runtime::receive), with a MessageWaiter:
  // for a message due when the last one came, asleep while its core is shared.
  std::thread receiver([&] {
    MessageWaiter<int> waiter;
    for (;;) {
      const Clock::time_point called = Clock::now();
      back.push(0);
      const MessageWaiter<int>::Wait wait = waiter.wait_for(0);
      const std::optional<Clock::time_point> sent = to_receiver.pop(wait.expected, wait.lead);
      if (!sent) return;
      latency.push_back(std::chrono::duration<double, std::micro>(Clock::now() - *sent).count());
      waiter.arrived(wait, *sent - called);
      waiter.watch_core();
    }
  });
  for (double wait : kWaitsUs) {
    for (int k = 0; k < kWakeRepetitions; ++k) {
      (void)back.pop();
      busy_for(wait);
      to_receiver.push(Clock::now());
    }
  }
  (void)back.pop();
  to_receiver.close();
  receiver.join();

  constexpr size_t kLevels = sizeof(kWaitsUs) / sizeof(kWaitsUs[0]);
  std::vector<double> at(kLevels);  // the median latency after each wait
  for (size_t i = 0; i < kLevels; ++i) {
    const auto first = latency.begin() + static_cast<std::ptrdiff_t>(i * kWakeRepetitions);
    at[i] = median(std::vector<double>(first, first + kWakeRepetitions));
  }
  const double extra = at.back() - at.front();
  if (extra < kNoDeepSleep) return {};
  // The first wait woken slowly (past the midpoint); at[0] never is, so slow >= 1.
  size_t slow = kLevels - 1;
  while (at[slow - 1] > at.front() + extra / 2) --slow;
  return {.latency_us = extra, .after_us = (kWaitsUs[slow - 1] + kWaitsUs[slow]) / 2};
}

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
  options.schedule = {.name = "1f1b", .recompute = Checkpoint::kNever};
  options.threads_per_worker = threads_per_worker;
  Pipe pipe(std::move(model), options);

  const StepTimes t = step_times(pipe, g);
  const double units_few = replay_schedule(one_f_one_b(p, kFew), Costs::unit(1, 1)).makespan;
  const double units_many = replay_schedule(one_f_one_b(p, kMany), Costs::unit(1, 1)).makespan;
  RuntimeOverhead o;
  // The layer timed with the threads each of the Pipe's p workers gets (PipeOptions).
  const int threads = threads_per_worker > 0 ? threads_per_worker : default_threads_per_worker(p);
  const double layer = layer_time_per_action(devices.front(), p, threads);
  o.per_action_us = std::max(0.0, (t.many_us - t.few_us) / (units_many - units_few) - layer);
  o.per_step_us = std::max(0.0, t.few_us - (o.per_action_us + layer) * units_few);
  const WakeCosts wake = measure_wake_costs();
  o.wake_latency_us = wake.latency_us;
  o.wake_after_us = wake.after_us;
  return o;
}

}  // namespace pipewright::pipeline
