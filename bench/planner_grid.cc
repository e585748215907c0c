// The planner's pick (pipeline::plan) against an exhaustive grid of hand configurations,
// measured side by side on this machine, for three models under three memory caps.
//
//   tools/bazel run //bench:planner_grid                      all three models
//   tools/bazel run //bench:planner_grid -- mlp resnet        some of them
//   tools/bazel run //bench:planner_grid -- --explain resnet 5.24MiB [zb-h1 [8]]  (or none)
//                     one plan, explained, without the grid (among one schedule and chunks)
//
// Models (the examples' own builders, their default sizes):
//   mlp     the main job: 784-512-512-10 with BatchNorm (deferred) and Dropout, batch 256,
//           2 workers
//   resnet  the residual example: width 256, 2 blocks with identity skips, batch 256, 2 workers
//   gpt     the character GPT: 4 blocks, dim 128, 4 heads, context 128, batch 32, 4 workers,
//           tied embedding / LM head
//
// The grid: balance by parameters and by time x {gpipe, 1f1b, zb-h1, zb-h2} x chunks {2, 4,
// 8, 16} x checkpoint {never, except_last, always}: 96 configurations per model, each trained
// (Adam) for kWarmup + kTimed steps and timed by the median train_step + optimizer step; its
// peak is the largest device's peak allocated bytes inside train_step (the allocators'
// counters, exact).
//
// The caps, per model, from the grid's own peaks:
//   none       no cap
//   median     the median of the grid's peaks: half the grid is out
//   recompute  midway between the least peak without a recompute and the least with one: no
//              configuration without recompute fits
// For each cap the planner plans (every registered schedule, its own chunks and recompute
// placement, the time to plan included) and its pick is measured; then the pick and the
// grid's fastest fitting configuration are measured again in alternating rounds, and the
// table gives both medians and their ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/shape_ops.h"
#include "examples/char_gpt/model.h"
#include "examples/fashion_mnist/trainer.h"
#include "examples/fashion_mnist_resnet/resnet.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "pipeline/balance.h"
#include "pipeline/pipe.h"
#include "pipeline/planner/planner.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"

namespace {

using namespace pipewright;
using pipeline::Checkpoint;

constexpr int kWarmup = 3, kTimed = 10, kRounds = 5;
constexpr uint64_t kSeed = 7;

struct Case {
  std::string name;
  std::function<nn::Sequential()> model;
  Tensor input, target;  // on the data device
  pipeline::LossFn loss;
  int workers = 2;
  bool deferred_batch_norm = false;
  std::vector<std::vector<std::string>> tied;  // PipeOptions::tied_parameters
};

const Device kData = Device::cpu(31);

std::vector<Device> worker_devices(int workers) {
  std::vector<Device> d;
  for (int w = 0; w < workers; ++w) d.push_back(Device::cpu(w));
  return d;
}

Tensor classes(int64_t rows, int64_t num_classes, Generator& g) {
  Tensor u = Tensor::empty({rows}, {.device = kData});
  g.uniform_(u, 0, static_cast<double>(num_classes));
  std::vector<int64_t> labels;
  for (float v : u.to_vector<float>()) labels.push_back(static_cast<int64_t>(v));
  return Tensor::from_vector(labels, Shape{rows}, kData);
}

Tensor cross_entropy(const Tensor& out, const Tensor& target) {
  return nn::cross_entropy(out, target);
}

Case mlp_case() {
  Generator g(1);
  Case c;
  c.name = "mlp";
  c.model = [] { return examples::build_model({512, 512}, 0.2, kSeed); };
  c.input = Tensor::empty({256, 784}, {.device = kData});
  g.uniform_(c.input, 0, 1);
  c.target = classes(256, 10, g);
  c.loss = cross_entropy;
  c.deferred_batch_norm = true;
  return c;
}

Case resnet_case() {
  Case c = mlp_case();
  c.name = "resnet";
  c.model = [] { return examples::build_resnet(examples::ResNetOptions{}, kSeed); };
  return c;
}

Case gpt_case() {
  constexpr int64_t kVocab = 96, kContext = 128, kBatch = 32;
  Generator g(2);
  examples::GptShape shape{.vocab = kVocab, .context = kContext, .dim = 128, .heads = 4, .layers = 4};
  Case c;
  c.name = "gpt";
  c.model = [shape] { return examples::build_char_gpt(shape, kSeed); };
  c.input = classes(kBatch * kContext, kVocab, g).reshape({kBatch, kContext});
  c.target = classes(kBatch * kContext, kVocab, g).reshape({kBatch, kContext});
  c.loss = [](const Tensor& logits, const Tensor& target) {
    return nn::cross_entropy(autograd::reshape(logits, {target.numel(), kVocab}),
                             target.reshape({target.numel()}));
  };
  c.workers = 4;
  c.tied = examples::tied_parameters(shape.layers);
  return c;
}

struct Config {
  std::string label;
  pipeline::PipeOptions options;  // a plan's: its recomputes as RecomputeCells
};

struct Measurement {
  double step_ms = 0;     // median of the timed steps
  int64_t peak = 0;       // the largest device's peak inside train_step
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Measurement measure(const Case& c, const Config& config) {
  pipeline::PipeOptions options = config.options;
  options.tied_parameters = c.tied;
  pipeline::Pipe pipe(c.model(), options);
  nn::Adam adam(pipe.parameters(), {.lr = 1e-3});
  std::vector<double> times;
  Measurement m;
  for (int step = 0; step < kWarmup + kTimed; ++step) {
    adam.zero_grad();
    for (const Device& d : options.devices) allocator_for(d).reset_peak();
    const auto start = std::chrono::steady_clock::now();
    pipe.train_step(c.input, c.target, c.loss);
    int64_t peak = 0;
    for (const Device& d : options.devices) peak = std::max(peak, allocator_for(d).peak());
    pipe.step(adam);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (step >= kWarmup) {
      times.push_back(ms);
      m.peak = std::max(m.peak, peak);
    }
  }
  m.step_ms = median(times);
  return m;
}

std::vector<Config> grid(const Case& c) {
  const std::vector<Device> devices = worker_devices(c.workers);
  std::vector<std::pair<std::string, std::vector<int>>> balances;
  {
    nn::Sequential model = c.model();
    balances.push_back({"params", pipeline::balance_by_parameters(c.workers, model)});
    try {
      const Tensor sample = c.input.slice(0, c.input.size(0) / 4).to(Device::cpu(0));
      balances.push_back({"time", pipeline::balance_by_time(c.workers, model, sample)});
    } catch (const std::exception& e) {
      std::cerr << c.name << ": balance by time skipped: " << e.what() << "\n";
    }
  }
  std::vector<Config> out;
  for (const auto& [how, balance] : balances) {
    for (const char* schedule : {"gpipe", "1f1b", "zb-h1", "zb-h2"}) {
      for (int chunks : {2, 4, 8, 16}) {
        for (Checkpoint mode : {Checkpoint::kNever, Checkpoint::kExceptLast, Checkpoint::kAlways}) {
          Config config;
          std::string b;
          for (int x : balance) b += (b.empty() ? "" : "|") + std::to_string(x);
          config.label = std::string(schedule) + " chunks " + std::to_string(chunks) +
                         " balance " + b + " (" + how + ") checkpoint " +
                         pipeline::to_string(mode);
          config.options.balance = balance;
          config.options.devices = devices;
          config.options.chunks = chunks;
          config.options.schedule = {.name = schedule, .recompute = mode};
          config.options.deferred_batch_norm = c.deferred_batch_norm;
          out.push_back(config);
        }
      }
    }
  }
  return out;
}

struct Point {
  Config config;
  Measurement measured;
};

std::string mib(int64_t bytes) { return pipeline::format_bytes(bytes); }

void run_case(const Case& c) {
  std::vector<Point> points;
  for (const Config& config : getenv("PW_GRID_SKIP") ? std::vector<Config>{} : grid(c)) {
    points.push_back({config, measure(c, config)});
    std::fprintf(stderr, "%s: %-60s %8.2f ms %s\n", c.name.c_str(), config.label.c_str(),
                 points.back().measured.step_ms, mib(points.back().measured.peak).c_str());
  }
  int64_t least_never = INT64_MAX, least = INT64_MAX;
  std::vector<int64_t> peaks;
  for (const Point& p : points) {
    peaks.push_back(p.measured.peak);
    least = std::min(least, p.measured.peak);
    if (p.config.options.schedule.recompute == pipeline::Recompute(Checkpoint::kNever)) {
      least_never = std::min(least_never, p.measured.peak);
    }
  }
  std::sort(peaks.begin(), peaks.end());
  std::vector<std::pair<std::string, int64_t>> caps = {{"none", 0}};
  if (!peaks.empty()) caps.push_back({"median", peaks[peaks.size() / 2]});
  if (least < least_never) caps.push_back({"recompute", least + (least_never - least) / 2});

  for (const auto& [cap_name, cap] : caps) {
    const Point* best = nullptr;
    for (const Point& p : points) {
      if (cap > 0 && p.measured.peak > cap) continue;
      if (best == nullptr || p.measured.step_ms < best->measured.step_ms) best = &p;
    }
    const auto start = std::chrono::steady_clock::now();
    std::optional<pipeline::Plan> plan;
    std::string refused;
    try {
      // The model planned on (cpu:0) is gone before anything is measured there.
      nn::Sequential model = c.model();
      plan = pipeline::plan(model, {c.input, c.target, c.loss}, worker_devices(c.workers),
                            {.memory_cap_bytes = cap,
                             .deferred_batch_norm = c.deferred_batch_norm,
                             .tied_parameters = c.tied});
    } catch (const pipeline::NoPlanFits& e) {
      refused = e.what();
    }
    const double plan_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!plan) {
      std::printf("| %s | %s | refused: %s |\n", c.name.c_str(), cap_name.c_str(), refused.c_str());
      continue;
    }
    Config picked{.label = plan->str(),
                  .options = plan->pipe_options(worker_devices(c.workers))};
    // Side by side: the pick and the grid's best, alternating.
    std::vector<double> pick_ms, best_ms;
    int64_t pick_peak = 0;
    for (int round = 0; round < kRounds; ++round) {
      const Measurement mp = measure(c, picked);
      pick_ms.push_back(mp.step_ms);
      pick_peak = std::max(pick_peak, mp.peak);
      if (best != nullptr) best_ms.push_back(measure(c, best->config).step_ms);
    }
    const double pick = median(pick_ms);
    const double grid_best = best != nullptr ? median(best_ms) : 0;
    std::printf("| %s | %s | %s | %.2f ms, peak %s%s | %s: %.2f ms | %.3f | %.1f s (predicted %.2f ms) |\n",
                c.name.c_str(), cap > 0 ? mib(cap).c_str() : "none", picked.label.c_str(), pick,
                mib(pick_peak).c_str(), cap > 0 && pick_peak > cap ? " OVER THE CAP" : "",
                best != nullptr ? best->config.label.c_str() : "(nothing fits)", grid_best,
                grid_best > 0 ? pick / grid_best : 0.0, plan_s, plan->step_time_us / 1000.0);
    std::fflush(stdout);
  }
}

}  // namespace

// The plan for one model and cap (0: none), with its alternatives and why each lost.
void explain(const Case& c, int64_t cap, std::vector<std::string> schedules,
             std::vector<int> chunks) {
  nn::Sequential model = c.model();
  const pipeline::Plan plan =
      pipeline::plan(model, {c.input, c.target, c.loss}, worker_devices(c.workers),
                     {.memory_cap_bytes = cap,
                      .schedules = std::move(schedules),
                      .chunks = std::move(chunks),
                      .deferred_batch_norm = c.deferred_batch_norm,
                      .tied_parameters = c.tied});
  std::printf("%s\n", plan.explain().c_str());
}

int run(int argc, char** argv) {
  const std::vector<std::pair<std::string, std::function<Case()>>> cases = {
      {"mlp", mlp_case}, {"resnet", resnet_case}, {"gpt", gpt_case}};
  if (argc >= 3 && std::string(argv[1]) == "--explain") {
    for (const auto& [name, make] : cases) {
      if (name != argv[2]) continue;
      std::vector<std::string> schedules;
      std::vector<int> chunks;
      if (argc >= 5) schedules.push_back(argv[4]);
      if (argc >= 6) chunks.push_back(std::stoi(argv[5]));
      const bool capped = argc >= 4 && std::string(argv[3]) != "none";
      explain(make(), capped ? pipeline::parse_bytes(argv[3]) : 0, schedules, chunks);
      return 0;
    }
    std::cerr << "planner_grid: unknown model '" << argv[2] << "' (mlp, resnet, gpt)\n";
    return 2;
  }
  std::set<std::string> wanted(argv + 1, argv + argc);
  for (const std::string& w : wanted) {
    if (w != "mlp" && w != "resnet" && w != "gpt") {
      std::cerr << "planner_grid: unknown model '" << w << "' (mlp, resnet, gpt)\n";
      return 2;
    }
  }
  std::printf("| model | cap | planner's pick | measured | grid's fastest that fits | pick / grid | time to plan |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& [name, make] : cases) {
    if (!wanted.empty() && wanted.count(name) == 0) continue;
    run_case(make());
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "planner_grid: " << e.what() << "\n";
    return 1;
  }
}
