// Where the main job's CPU training step goes, against what the machine's GEMM can do
// (docs/BENCHMARKS.md, "Step breakdown").
//
// The main job's model and step (examples/fashion_mnist defaults): Linear(784, 512) ->
// BatchNorm1d -> ReLU -> Dropout(0.2) -> Linear(512, 512) -> BatchNorm1d -> ReLU -> Dropout(0.2)
// -> Linear(512, 10), cross-entropy, Adam, batch 256 in chunks = 4 micro-batches of 64 rows,
// no checkpointing; run as
//   --workers 1: one worker with every core as its intra-op threads, and
//   --workers 2: two workers, a thread each, cut by parameters as the example does, on GPipe
//                and on ZB-H1 (the example's default).
// For each, over `steps` steps (rounds of 20, the configurations interleaved), medians:
//   1. the measured step: Pipe::train_step and Pipe::step(Adam) apart, and from the step's
//      Trace each worker's busy time (its actions) and the rest (idle: bubble and hand-offs);
//   2. each layer's forward, input-gradient and weight-gradient time for a 64-row micro-batch
//      on the worker's thread count (the planner's profile_model), times 4 micro-batches;
//   3. for each Linear, its three products (y = x·Wᵀ, dx = dy·W, dW = dyᵀ·x) through raw
//      cblas_sgemm on as many OpenBLAS threads, on the same shapes: the achievable time;
//   4. the machine's sgemm peak: 1024³ on OpenBLAS's own threads (1 and all cores).
//
//   tools/bazel run //bench:step_breakdown [-- steps]      (default 60 steps)
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "examples/fashion_mnist/trainer.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "nn/sequential.h"
#include "pipeline/balance.h"
#include "pipeline/pipe.h"
#include "pipeline/planner/profile.h"
#include "pipeline/worker_cpus.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace pipewright;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kBatch = 256, kChunks = 4, kMicro = kBatch / kChunks;

// The example's own model with its defaults (hidden 512 512, dropout 0.2), one seed.
nn::Sequential main_job_model() { return examples::build_model({512, 512}, 0.2, 0); }

// The floating-point operations of the step's matrix products per sample: 2·in·out for each
// Linear's forward, weight gradient and (but for the first, whose input is data) input
// gradient.
double flops_per_sample() {
  double flops = 0;
  bool first = true;
  const nn::Sequential model = main_job_model();
  for (size_t i = 0; i < model.size(); ++i) {
    const auto* linear = dynamic_cast<const nn::Linear*>(&model[i]);
    if (linear == nullptr) continue;
    const double one = 2.0 * static_cast<double>(linear->weight().numel());
    flops += one * (first ? 2 : 3);
    first = false;
  }
  return flops;
}

Tensor loss_fn(const Tensor& logits, const Tensor& target) {
  return nn::cross_entropy(logits, target);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double micros(Clock::time_point since) {
  return std::chrono::duration<double, std::micro>(Clock::now() - since).count();
}

// Median microseconds of `work` on OpenBLAS's own `threads` threads (the library keeps
// OpenBLAS at one thread and splits products itself: restored afterwards).
double openblas_us(int threads, int reps, const std::function<void()>& work) {
  openblas_set_num_threads(threads);
  for (int i = 0; i < 3; ++i) work();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    work();
    t.push_back(micros(start));
  }
  openblas_set_num_threads(1);
  return median(t);
}

// The three products of a Linear(in -> out) on `rows` rows, raw: forward x[rows,in]·Wᵀ,
// input gradient dy[rows,out]·W, weight gradient dyᵀ·x.
struct LinearRaw {
  double forward_us, input_us, weight_us;
};

LinearRaw raw_linear(int64_t rows, int64_t in, int64_t out, int threads) {
  std::vector<float> x(rows * in, 0.5f), w(out * in, 0.25f), y(rows * out), dy(rows * out, 1.f),
      dx(rows * in), dw(out * in);
  const int m = static_cast<int>(rows), k = static_cast<int>(in), n = static_cast<int>(out);
  constexpr int kReps = 201;
  return {
      openblas_us(threads, kReps, [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.f, x.data(), k, w.data(),
                    k, 0.f, y.data(), n);
      }),
      openblas_us(threads, kReps, [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, k, n, 1.f, dy.data(), n,
                    w.data(), k, 0.f, dx.data(), k);
      }),
      openblas_us(threads, kReps, [&] {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, k, m, 1.f, dy.data(), n,
                    x.data(), k, 0.f, dw.data(), k);
      }),
  };
}

double peak_gflops(int threads) {
  const int n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  const double us = openblas_us(threads, 15, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(),
                n, 0.f, c.data(), n);
  });
  return 2.0 * n * n * n / us / 1e3;
}

// One configuration of the main job: its Pipe, optimizer, profile and measured steps.
struct Run {
  int workers = 1, threads = 1;
  std::string schedule;
  std::vector<int> balance;
  pipeline::ModelProfile profile;
  std::unique_ptr<pipeline::Pipe> pipe;
  std::unique_ptr<nn::Adam> adam;
  std::vector<double> train_us, adam_us, wall_us;
  std::vector<std::vector<double>> busy_us;
};

Run make_run(int workers, const std::string& schedule, const Tensor& x, const Tensor& y) {
  Run run;
  run.workers = workers;
  run.schedule = schedule;
  run.threads = pipeline::default_threads_per_worker(workers);
  nn::Sequential model = main_job_model();
  run.balance = workers == 1 ? std::vector<int>{static_cast<int>(model.size())}
                             : pipeline::balance_by_parameters(workers, model);
  nn::Sequential copy = main_job_model();
  run.profile = pipeline::profile_model(copy, x, y, loss_fn,
                                        {.rows = {kMicro}, .threads = run.threads,
                                         .workers = workers, .warmup = 5, .repetitions = 41});
  std::vector<Device> devices;
  for (int w = 0; w < workers; ++w) devices.push_back(Device::cpu(w));
  run.pipe = std::make_unique<pipeline::Pipe>(
      std::move(model),
      pipeline::PipeOptions{.balance = run.balance, .devices = devices,
                            .chunks = static_cast<int>(kChunks),
                            .schedule = {.name = schedule,
                                         .recompute = pipeline::Checkpoint::kNever}});
  run.adam = std::make_unique<nn::Adam>(run.pipe->parameters(), nn::AdamOptions{.lr = 1e-3});
  run.busy_us.resize(static_cast<size_t>(workers));
  return run;
}

// `steps` steps, the first few untimed.
void measure(Run& run, int steps, const Tensor& x, const Tensor& y) {
  for (int s = 0; s < steps + 3; ++s) {
    run.adam->zero_grad();
    auto start = Clock::now();
    run.pipe->train_step(x, y, loss_fn);
    const double t = micros(start);
    start = Clock::now();
    run.pipe->step(*run.adam);
    const double a = micros(start);
    if (s < 3) continue;
    run.train_us.push_back(t);
    run.adam_us.push_back(a);
    const pipeline::Trace trace = run.pipe->last_trace();
    run.wall_us.push_back(trace.wall_us());
    for (int w = 0; w < run.workers; ++w) run.busy_us[w].push_back(trace.busy_us(w));
  }
}

void report(const Run& run) {
  const int workers = run.workers, threads = run.threads;
  const std::vector<int>& balance = run.balance;
  const double step = median(run.train_us) + median(run.adam_us);
  std::printf("\n## --workers %d --schedule %s (%d intra-op thread%s each), balance", workers,
              run.schedule.c_str(), threads, threads == 1 ? "" : "s");
  for (int b : balance) std::printf(" %d", b);
  std::printf("\n\nstep %.0f us = train_step %.0f + Adam %.0f  (%.0f samples/s; its products, "
              "%.2f MFLOP per sample, at %.0f GFLOP/s)\n",
              step, median(run.train_us), median(run.adam_us), kBatch / step * 1e6,
              flops_per_sample() / 1e6, kBatch * flops_per_sample() / step / 1e3);
  std::printf("train_step's trace: wall %.0f us; busy", median(run.wall_us));
  for (int w = 0; w < workers; ++w) std::printf(" w%d %.0f", w, median(run.busy_us[w]));
  std::printf("\n\n| layer | worker | forward | input grad | weight grad | sum (us, 4 micro-batches)"
              " | raw OpenBLAS, same products | ours ÷ raw |\n|---|---|---|---|---|---|---|---|\n");
  const nn::Sequential shapes = main_job_model();
  std::vector<double> per_worker(workers, 0);
  double linear_ours = 0, linear_raw = 0, other = 0;
  int layer = 0;
  for (int w = 0; w < workers; ++w) {
    for (int i = 0; i < balance[w]; ++i, ++layer) {
      const pipeline::LayerProfile& p = run.profile.layers[layer];
      const double f = kChunks * p.forward_us.at(kMicro), bi = kChunks * p.backward_input_us.at(kMicro),
                   bw = kChunks * p.backward_weight_us.at(kMicro), sum = f + bi + bw;
      per_worker[w] += sum;
      std::string raw = "—", ratio = "—";
      const auto* linear = dynamic_cast<const nn::Linear*>(&shapes[static_cast<size_t>(layer)]);
      if (linear != nullptr) {
        const int64_t in = linear->weight().size(1), out = linear->weight().size(0);
        const LinearRaw r = raw_linear(kMicro, in, out, threads);
        // The first layer's input is data: no input gradient.
        const double raw_sum = kChunks * (r.forward_us + (layer == 0 ? 0 : r.input_us) + r.weight_us);
        raw = std::to_string(static_cast<int>(raw_sum + 0.5));
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.2f", sum / raw_sum);
        ratio = buf;
        linear_ours += sum;
        linear_raw += raw_sum;
      } else {
        other += sum;
      }
      std::printf("| %s | %d | %.0f | %.0f | %.0f | %.0f | %s | %s |\n", p.name.c_str(), w, f, bi,
                  bw, sum, raw.c_str(), ratio.c_str());
    }
  }
  const pipeline::LayerProfile& loss = run.profile.loss;
  const double loss_us = kChunks * (loss.forward_us.at(kMicro) + loss.backward_us.at(kMicro));
  per_worker[workers - 1] += loss_us;
  std::printf("| loss | %d | | | | %.0f | — | — |\n\n", workers - 1, loss_us);
  std::printf("Linear layers %.0f us (raw products %.0f: %.2fx); BatchNorm, ReLU, loss %.0f us\n",
              linear_ours, linear_raw, linear_ours / linear_raw, other + loss_us);
  for (int w = 0; w < workers; ++w) {
    std::printf("worker %d: layers' profile %.0f us, busy in the step %.0f us, wall %.0f us\n", w,
                per_worker[w], median(run.busy_us[w]), median(run.wall_us));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 60;
  Generator data(1);
  GeneratorGuard guard(data);
  const Tensor x = Tensor::randn({kBatch, 784});
  std::vector<int64_t> labels(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) labels[i] = (i * 7) % 10;
  const Tensor y = Tensor::from_vector(labels);
  const int cores = hardware_threads();
  std::printf("# Step breakdown: main job, batch %lld, chunks %lld, Adam; %d cores\n",
              static_cast<long long>(kBatch), static_cast<long long>(kChunks), cores);
  std::printf("sgemm 1024^3 peak: %.1f GFLOP/s on 1 thread, %.1f on %d\n", peak_gflops(1),
              peak_gflops(cores), cores);
  // The configurations side by side: rounds of 20 steps each, interleaved.
  std::vector<Run> runs;
  runs.push_back(make_run(1, "gpipe", x, y));
  runs.push_back(make_run(2, "gpipe", x, y));
  runs.push_back(make_run(2, "zb-h1", x, y));
  for (int done = 0; done < steps; done += 20) {
    for (Run& run : runs) measure(run, 20, x, y);
  }
  for (const Run& run : runs) report(run);
  return 0;
}
