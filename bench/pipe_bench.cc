// Pipeline step on 2 virtual CPU devices against the plain model on both cores.
//
// Model (batch 256): 784 -> Linear -> BN -> ReLU -> Linear(1024) -> BN -> ReLU -> Linear(10),
// cross-entropy loss, no optimizer step (forward + backward only, in every variant).
// The Pipe cuts it as balance {3, 4} (Linear·BN·ReLU | Linear·BN·ReLU·Linear, the most even
// cut at layer granularity) over cpu:0 and cpu:1, chunks 8 (micro-batches of 32),
// deferred BatchNorm, each worker with ONE intra-op thread: two stages, two cores.
//
//   pipe/<api>/<schedule>/<checkpoint>   train_step(x, y, cross_entropy) under the schedule, or
//                                        api "forward": cross_entropy(pipe.forward(x)).backward()
//   plain/threads:N                      cross_entropy(model(x), y).backward() with N threads
//   plain/microbatched/threads:1         the same, 8 micro-batches one after another, 1 thread
//   pipe/train_step/1f1b/never/chunks:C  1F1B with C micro-batches instead of 8
//   balanced/...                         the same measurements on a model with two equal
//                                        halves (4 × Linear(1024)·ReLU, input requiring grad)
//
// Counters (per step, averaged over the iterations):
//   bubble         measured: Σ idle / (workers × wall) from the runtime's trace (trace.h)
//   bubble_theory  (p-1)/(m+p-1): equal stages, free communication
//   bubble_sim     the replay (pipeline/schedule/replay.h) run on the schedule with the
//                  MEASURED mean cost of each action kind on each stage over all timed steps
//   bubble_replay  each step's schedule replayed with that step's measured action durations
//                  and free hand-offs, averaged: bubble - bubble_replay is the idle time the
//                  runtime adds (Note [Replaying a step], pipeline/trace.cc)
//   stage0_ms, stage1_ms  busy time of each worker per step
//   faults_per_step       minor page faults of the process per step (fresh memory touched)
//   reserved_mb           bytes held by the allocators of cpu:0 and cpu:1 after the run (in
//                         use + cached; tensor/cpu_allocator.h), MiB
// PIPEWRIGHT_CPU_CACHING=0 runs everything without the CPU caching allocator (to compare).
// PIPE_BENCH_TRACE=/path/trace.json writes the Chrome trace of the last step of each
// pipe benchmark (open in chrome://tracing or ui.perfetto.dev).
//
//   tools/bazel run //bench:pipe_bench -- --benchmark_repetitions=5
//                   --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "bench/pipeline_bench_util.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule/generators.h"
#include "pipeline/schedule/replay.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"
#include "tensor/threads.h"

namespace pipewright {
namespace {

constexpr int64_t kBatch = 256, kIn = 784, kHidden = 1024, kClasses = 10;
constexpr int kChunks = 8;

nn::Sequential make_model() {
  Generator g(0);
  GeneratorGuard guard(g);
  return nn::Sequential{nn::Linear(kIn, kHidden),     nn::BatchNorm1d(kHidden), nn::ReLU(),
                        nn::Linear(kHidden, kHidden), nn::BatchNorm1d(kHidden), nn::ReLU(),
                        nn::Linear(kHidden, kClasses)};
}

// A model whose two halves cost the same (the MLP's cannot: see docs/BENCHMARKS.md): four
// Linear(1024)·ReLU blocks, split 2 | 2, on an input that requires grad (so stage 0 also
// computes its input gradient, like stage 1).
nn::Sequential make_balanced_model() {
  Generator g(2);
  GeneratorGuard guard(g);
  nn::Sequential m;
  for (int i = 0; i < 4; ++i) {
    m.push_back(nn::Linear(kHidden, kHidden));
    m.push_back(nn::ReLU());
  }
  return m;
}

Tensor make_input(int64_t features = kIn) {
  Tensor x = Tensor::empty({kBatch, features});
  Generator g(1);
  g.uniform_(x, -1.0, 1.0);
  return x;
}

Tensor make_labels(Device device, int64_t classes = kClasses) {
  std::vector<int64_t> labels(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) labels[i] = (i * 7) % classes;
  return Tensor::from_vector(labels, device);
}

Tensor cross_entropy(const Tensor& out, const Tensor& y) { return nn::cross_entropy(out, y); }

// Minor page faults of the process so far (first touches of freshly mapped memory).
double minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_minflt);
}

// Runs `step` for every benchmark iteration and reports page faults per step.
template <class Step>
void timed_loop(benchmark::State& state, Step&& step) {
  const double faults = minor_faults();
  for (auto _ : state) step();
  state.counters["faults_per_step"] =
      (minor_faults() - faults) / static_cast<double>(state.iterations());
  state.counters["reserved_mb"] = static_cast<double>(allocator_for(Device::cpu(0)).reserved() +
                                                      allocator_for(Device::cpu(1)).reserved()) /
                                  (1 << 20);
}

void pipe_step(benchmark::State& state, const std::string& api, const std::string& schedule,
               pipeline::Checkpoint checkpoint, bool balanced, int chunks = kChunks) {
  pipeline::Pipe pipe(balanced ? make_balanced_model() : make_model(),
                      {.balance = balanced ? std::vector<int>{4, 4} : std::vector<int>{3, 4},
                                     .devices = {Device::cpu(0), Device::cpu(1)},
                                     .chunks = chunks,
                                     .schedule = {.name = schedule, .recompute = checkpoint},
                                     .deferred_batch_norm = true,
                                     .threads_per_worker = 1});
  Tensor x = make_input(balanced ? kHidden : kIn);
  if (balanced) x.set_requires_grad(true);
  const Tensor y = make_labels(Device::cpu(1), balanced ? kHidden : kClasses);
  auto step = [&]() -> pipeline::Trace {
    pipe.zero_grad();
    if (api == "forward") {
      cross_entropy(pipe.forward(x), y).backward();
      return pipe.last_trace();
    }
    return pipe.train_step(x, y, cross_entropy).trace;
  };
  step();  // warm-up
  // The schedule that runs, re-made for the replay (same generator, same recompute rule).
  pipeline::Schedule ran = pipeline::make_schedule(api == "forward" ? "gpipe" : schedule, 2,
                                                   chunks);
  ran = pipeline::with_recompute(ran, pipeline::checkpoint_predicate(checkpoint, chunks));
  double bubble = 0, bubble_replay = 0, busy0 = 0, busy1 = 0;
  bench::MeasuredCosts costs;
  pipeline::Trace trace;
  timed_loop(state, [&] {
    trace = step();
    bubble += trace.bubble_fraction();
    bubble_replay += trace.replayed_bubble(ran);
    costs.add(trace);
    busy0 += trace.busy_us(0);
    busy1 += trace.busy_us(1);
  });
  const double n = static_cast<double>(state.iterations());
  state.counters["bubble"] = bubble / n;
  state.counters["bubble_theory"] = pipeline::theoretical_bubble(2, chunks);
  state.counters["bubble_sim"] = pipeline::replay_schedule(ran, costs.costs(2)).bubble_fraction;
  state.counters["bubble_replay"] = bubble_replay / n;
  state.counters["stage0_ms"] = busy0 / n / 1000;
  state.counters["stage1_ms"] = busy1 / n / 1000;
  if (const char* path = std::getenv("PIPE_BENCH_TRACE")) {
    trace.write_chrome_json(std::string(path) + "." + api + "." + schedule + "." +
                            pipeline::to_string(checkpoint) + ".json");
  }
}

void plain_step(benchmark::State& state, bool balanced) {
  ThreadBudgetGuard threads(static_cast<int>(state.range(0)));
  nn::Sequential model = balanced ? make_balanced_model() : make_model();
  Tensor x = make_input(balanced ? kHidden : kIn);
  if (balanced) x.set_requires_grad(true);
  const Tensor y = make_labels(Device::cpu(0), balanced ? kHidden : kClasses);
  auto step = [&] {
    model.zero_grad();
    cross_entropy(model(x), y).backward();
  };
  step();
  timed_loop(state, step);
}

// The plain model run micro-batch by micro-batch on one thread (the loss of each scaled by
// 1/8 through its gradient): the pipeline's total work without the pipeline. Per-stage busy
// times add up to about this; the difference to plain/threads:1 is the cost of micro-batching
// itself (GEMMs of 32 rows, 8 weight-gradient accumulations instead of 1).
void plain_microbatched(benchmark::State& state) {
  ThreadBudgetGuard threads(1);
  nn::Sequential model = make_model();
  const Tensor x = make_input();
  const Tensor y = make_labels(Device::cpu(0));
  const std::vector<Tensor> xs = x.chunk(kChunks), ys = y.chunk(kChunks);
  auto step = [&] {
    model.zero_grad();
    for (int j = 0; j < kChunks; ++j) {
      Tensor loss = cross_entropy(model(xs[j]), ys[j]);
      loss.backward(Tensor::full(loss.shape(), 1.0 / kChunks));
    }
  };
  step();
  timed_loop(state, step);
}

void register_all() {
  using pipeline::Checkpoint;
  struct Variant {
    std::string api, schedule;
    Checkpoint checkpoint;
  };
  const std::vector<Variant> variants = {
      {"forward", "gpipe", Checkpoint::kNever},
      {"forward", "gpipe", Checkpoint::kExceptLast},
      {"train_step", "gpipe", Checkpoint::kNever},
      {"train_step", "1f1b", Checkpoint::kNever},
      {"train_step", "zb-h1", Checkpoint::kNever},
      {"train_step", "zb-h2", Checkpoint::kNever},
  };
  for (const Variant& v : variants) {
    const std::string name =
        "pipe/" + v.api + "/" + v.schedule + "/" + pipeline::to_string(v.checkpoint);
    benchmark::RegisterBenchmark(name.c_str(), [v](benchmark::State& state) {
      pipe_step(state, v.api, v.schedule, v.checkpoint, false);
    })->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
  }
  // Fewer, larger micro-batches: more efficient kernels, a larger bubble.
  for (int chunks : {2, 4, 16}) {
    benchmark::RegisterBenchmark(
        ("pipe/train_step/1f1b/never/chunks:" + std::to_string(chunks)).c_str(),
        [chunks](benchmark::State& state) {
          pipe_step(state, "train_step", "1f1b", Checkpoint::kNever, false, chunks);
        })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(2.0);
  }
  for (const std::string schedule : {"gpipe", "1f1b"}) {
    benchmark::RegisterBenchmark(("balanced/pipe/train_step/" + schedule + "/never").c_str(),
                                 [schedule](benchmark::State& state) {
                                   pipe_step(state, "train_step", schedule,
                                             Checkpoint::kNever, true);
                                 })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(2.0);
  }
  benchmark::RegisterBenchmark("balanced/plain/threads",
                               [](benchmark::State& state) { plain_step(state, true); })
      ->Arg(1)
      ->Arg(2)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(2.0);
  benchmark::RegisterBenchmark("plain/microbatched/threads:1", plain_microbatched)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(2.0);
  benchmark::RegisterBenchmark("plain/threads",
                               [](benchmark::State& state) { plain_step(state, false); })
      ->Arg(1)
      ->Arg(2)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(2.0);
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
