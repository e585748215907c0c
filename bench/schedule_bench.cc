// Every pipeline schedule on a balanced deep MLP: step time, bubble (measured, replayed with
// the measured costs, textbook) and peak memory per stage device.
//
// Model: kLayers identical blocks Linear(kWidth→kWidth)·ReLU (so every cut at block
// boundaries gives stages of equal cost), batch kBatch, MSE loss against zeros on the last
// stage, input requiring grad (stage 0 computes dX like the others). Every registered
// schedule (pipeline/schedule/registry.h) with every (p, m) its generator accepts, cut into
// p·v stages of equal size, v = 2 where the schedule takes it (the interleaved ones and
// looped BFS round robin, ZB-V and DualPipeV in a V), else 1; worker w on cpu:w, each worker
// ONE intra-op thread. No optimizer step and no zero_grad (gradients accumulate
// into the existing .grad tensors, so every measured step allocates the same things).
//
//   schedule/p:P/m:M/<name>     train_step(x, y, mse_loss) under <name>, P workers, M micro-batches
//   memory/p:P/m:M/<name>       the same with an input that does NOT require grad, for the
//                               memory comparison: otherwise stage 0 also keeps every
//                               micro-batch's input gradient until the step ends (x.grad,
//                               kBatch × kWidth floats = 512 KiB, whatever the schedule)
//
// Counters (per step; "bubble" means Σ idle / (workers × wall) throughout):
//   bubble          measured: from the runtime's trace (pipeline/trace.h)
//   bubble_replay   each step's schedule replayed with that step's measured action durations
//                   and free hand-offs, averaged over the steps: the idle time the schedule
//                   and the real durations force; bubble - bubble_replay is what the runtime
//                   adds (Note [Replaying a step], pipeline/trace.cc)
//   bubble_sim      the replay run on the same schedule with the MEASURED mean cost of
//                   each action kind on each stage over all timed steps (smaller than the
//                   replay when the workers' speeds drift; see the Note)
//   bubble_formula  the closed form for equal stages and free communication: (p-1)/(v·m+p-1)
//                   for the schedules with whole backwards (gpipe and 1f1b at v = 1, idle
//                   (p-1)(tF+tB)/v per worker), (p-1)/(3vm+p-1) for those that split them
//                   (ScheduleInfo::splits_backward; zb-h1 and zb-h2 at v = 1, idle p-1
//                   virtual-stage actions with tF = tI = tW; within one step ZB-H2's makespan
//                   equals ZB-H1's at equal costs, see docs/schedules.md)
//   peak_kib_wN     peak bytes allocated on worker N's device during a step, above what it
//                   held before (KiB, the largest over the timed steps): activations kept
//                   for backward, messages received early, and one action's working memory
//   busy_ms_wN      busy time of worker N per step
//
// SCHEDULE_BENCH_TRACE=/path/prefix writes the Chrome trace of each run's last step to
// /path/prefix.<p>.<m>.<schedule>.json (open in ui.perfetto.dev).
//
// The machine this was written for has 2 cores: with p = 4 the four worker threads share
// them, so an action can be descheduled mid-way and last longer; the trace counts that as
// busy time. bubble_sim, built from those same durations, is the fair yardstick there.
//
//   tools/bazel build //bench:schedule_bench
//   bazel-bin/bench/schedule_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/pipeline_bench_util.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule/generators.h"
#include "pipeline/schedule/replay.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"

namespace pipewright {
namespace {

constexpr int64_t kBatch = 256, kWidth = 512;
constexpr int kLayers = 8;  // Linear·ReLU blocks; divisible by every p·v used below

nn::Sequential make_mlp() {
  Generator g(0);
  GeneratorGuard guard(g);
  nn::Sequential m;
  for (int i = 0; i < kLayers; ++i) {
    m.push_back(nn::Linear(kWidth, kWidth));
    m.push_back(nn::ReLU());
  }
  return m;
}

/// Virtual stages per worker: 2 where the schedule takes it, else the one it takes.
int virtual_stages_per_worker(const std::string& schedule) {
  return pipeline::find_schedule(schedule).virtual_stages.clamp(2);
}

double formula_bubble(const std::string& schedule, int p, int m, int v) {
  const double idle = p - 1;
  // Idle (p-1) virtual-stage actions against 3·m·v per worker
  // (//tests/pipeline/schedule:frontier_test).
  if (pipeline::find_schedule(schedule).splits_backward) {
    return idle / (3.0 * v * m + idle);
  }
  return idle / (v * m + idle);
}

/// Whether the schedule's generator takes p workers and m micro-batches (interleaved 1F1B
/// needs m % p == 0, DualPipeV m >= 2p, ...): the generator itself is asked.
bool accepts(const std::string& schedule, int p, int m) {
  try {
    (void)pipeline::make_schedule(schedule, p, m, virtual_stages_per_worker(schedule));
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

void schedule_step(benchmark::State& state, const std::string& schedule, int p, int m,
                   bool input_grad = true) {
  const int v = virtual_stages_per_worker(schedule);
  const int stages = p * v;
  std::vector<Device> devices;
  for (int w = 0; w < p; ++w) devices.push_back(Device::cpu(w));
  pipeline::Pipe pipe(make_mlp(), {.balance = std::vector<int>(static_cast<size_t>(stages),
                                                               2 * kLayers / stages),
                                   .devices = devices,
                                   .chunks = m,
                                   .schedule = {.name = schedule, .virtual_stages = v,
                                                .recompute = pipeline::Checkpoint::kNever},
                                   .threads_per_worker = 1});
  Tensor x = Tensor::empty({kBatch, kWidth});
  Generator g(1);
  g.uniform_(x, -1.0, 1.0);
  x.set_requires_grad(input_grad);
  const Tensor y = Tensor::zeros({kBatch, kWidth}, {.device = devices.back()});
  auto loss = [](const Tensor& out, const Tensor& target) { return nn::mse_loss(out, target); };

  for (int i = 0; i < 2; ++i) pipe.train_step(x, y, loss);  // warm-up; creates every .grad
  bench::MeasuredCosts costs;
  double bubble = 0, bubble_replay = 0;
  std::vector<double> busy(static_cast<size_t>(p), 0.0);
  std::vector<int64_t> peak(static_cast<size_t>(p), 0);
  pipeline::Schedule ran;
  pipeline::Trace last_trace;
  for (auto _ : state) {
    std::vector<int64_t> base;
    for (const Device& d : devices) {
      base.push_back(allocator_for(d).allocated());
      allocator_for(d).reset_peak();
    }
    pipeline::StepResult r = pipe.train_step(x, y, loss);
    for (int w = 0; w < p; ++w) {
      const size_t i = static_cast<size_t>(w);
      peak[i] = std::max(peak[i], allocator_for(devices[i]).peak() - base[i]);
      busy[i] += r.trace.busy_us(w);
    }
    bubble += r.trace.bubble_fraction();
    costs.add(r.trace);
    bubble_replay += r.trace.replayed_bubble(r.schedule);
    ran = std::move(r.schedule);
    last_trace = std::move(r.trace);
  }
  if (const char* path = std::getenv("SCHEDULE_BENCH_TRACE")) {
    last_trace.write_chrome_json(std::string(path) + "." + std::to_string(p) + "." +
                                 std::to_string(m) + "." + schedule + ".json");
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["bubble"] = bubble / n;
  state.counters["bubble_replay"] = bubble_replay / n;
  state.counters["bubble_sim"] =
      pipeline::replay_schedule(ran, costs.costs(stages)).bubble_fraction;
  state.counters["bubble_formula"] = formula_bubble(schedule, p, m, v);
  for (int w = 0; w < p; ++w) {
    const size_t i = static_cast<size_t>(w);
    state.counters["peak_kib_w" + std::to_string(w)] = static_cast<double>(peak[i]) / 1024.0;
    state.counters["busy_ms_w" + std::to_string(w)] = busy[i] / n / 1000.0;
  }
}

void register_all() {
  for (int p : {2, 4}) {
    for (int m : {4, 8, 16}) {
      for (const std::string& schedule : pipeline::schedule_names()) {
        if (!accepts(schedule, p, m)) continue;
        const std::string name = "schedule/p:" + std::to_string(p) + "/m:" + std::to_string(m) +
                                 "/" + schedule;
        benchmark::RegisterBenchmark(name.c_str(), [schedule, p, m](benchmark::State& state) {
          schedule_step(state, schedule, p, m);
        })->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);
      }
    }
  }
  for (int p : {2, 4}) {
    for (int m : {8, 16}) {
      for (const std::string schedule : {"gpipe", "1f1b", "zb-h1", "zb-v", "dualpipev"}) {
        const std::string name = "memory/p:" + std::to_string(p) + "/m:" + std::to_string(m) +
                                 "/" + schedule;
        benchmark::RegisterBenchmark(name.c_str(), [schedule, p, m](benchmark::State& state) {
          schedule_step(state, schedule, p, m, /*input_grad=*/false);
        })->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);
      }
    }
  }
}

}  // namespace
}  // namespace pipewright

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  pipewright::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
