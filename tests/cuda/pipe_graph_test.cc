// PipeOptions::cuda_graphs (Note [A step as one graph], pipeline/step_graph.h): every
// schedule, 1 and 2 workers on one GPU, with and without checkpointing, deferred BatchNorm and
// AdamW with a learning rate that changes every step (Dropout and clipping too): the graphed
// steps (one eager, one captured, the rest replayed; 100 for every schedule) equal the eager
// steps bit for bit —
// losses, weights, BatchNorm's running statistics, the optimizer's state. Under cudasim the race detector
// checks every replay and the capture refuses what CUDA would refuse.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/shape_ops.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/grad_scaler.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim_adam.h"
#include "nn/optim_sgd.h"
#include "nn/normalization.h"
#include "nn/transformer.h"
#include "pipeline/pipe.h"
#include "tensor/generator.h"
#include "tests/cuda/gpu_test.h"
#include "tests/pipeline/pipe_test_util.h"

namespace pipewright::testing {
namespace {

using pipeline::Checkpoint;
using pipeline::Pipe;
using pipeline::PipeOptions;

constexpr int kSteps = 12;
constexpr int kLongRun = 100;  // the goal: 100 graphed steps equal 100 eager ones
constexpr int64_t kRows = 16;

nn::Sequential model(double dropout) {
  Generator g(11);
  GeneratorGuard guard(g);
  return nn::Sequential(nn::Linear(4, 16), nn::BatchNorm1d(16), nn::ReLU(), nn::Dropout(dropout),
                        nn::Linear(16, 16), nn::ReLU(), nn::Linear(16, 3));
}

/// Adds a constant made on the host at every forward: a copy from host memory, which a
/// capture refuses (its replays would copy stale bytes).
class AddHostConstant : public nn::Module {
 public:
  using Module::forward;
  Tensor forward(const Tensor& x) override {
    return autograd::add(x, Tensor::full({x.size(-1)}, 0.5).to(x.device()));
  }
  std::string str() const override { return "AddHostConstant()"; }
};

struct Batch {
  Tensor x, y;
};

std::vector<Batch> batches(int steps) {
  std::vector<Batch> out;
  for (int s = 0; s < steps; ++s) {
    std::vector<int64_t> labels;
    for (int64_t r = 0; r < kRows; ++r) labels.push_back((r * 5 + s) % 3);
    out.push_back(
        {pipeline::testing::randn({kRows, 4}, 300 + s), Tensor::from_vector(labels, {kRows})});
  }
  return out;
}

struct Config {
  std::string schedule;
  int workers;
  int virtual_stages;
  Checkpoint checkpoint;
  int gpus = 1;  // 2: worker w on cuda:w (Note [A step over devices])
};

struct Run {
  std::vector<double> losses;
  nn::NamedTensors model_state, optimizer_state;
  int64_t replays = 0, captures = 0, pool_bytes = 0;
};

Run train(const Config& c, bool graphs, const std::vector<Batch>& data, double dropout = 0.0,
          double max_grad_norm = 0.0, bool sgd = false) {
  const int stages = c.workers * c.virtual_stages;
  const std::vector<int> balance = stages == 1   ? std::vector<int>{7}
                                   : stages == 2 ? std::vector<int>{4, 3}
                                                 : std::vector<int>{2, 2, 2, 1};
  Pipe pipe(model(dropout),
            PipeOptions{.balance = balance,
                        .devices = c.gpus == 1
                                       ? std::vector<Device>(static_cast<size_t>(c.workers), gpu())
                                       : std::vector<Device>{Device::cuda(0), Device::cuda(1)},
                        .chunks = 4,
                        .schedule = {.name = c.schedule,
                                     .virtual_stages = c.virtual_stages,
                                     .recompute = c.checkpoint},
                        .cuda_graphs = graphs,
                        .deferred_batch_norm = true});
  nn::AdamW adamw(pipe.parameters(), {.lr = 1e-2, .weight_decay = 1e-2});
  nn::SGD momentum(pipe.parameters(), {.lr = 1e-2, .momentum = 0.9, .nesterov = true});
  nn::Optimizer& adam = sgd ? static_cast<nn::Optimizer&>(momentum) : adamw;
  const pipeline::LossFn loss = [](const Tensor& out, const Tensor& target) {
    return nn::cross_entropy(out, target);
  };
  Run run;
  for (size_t s = 0; s < data.size(); ++s) {
    adam.set_lr(1e-2 / (1.0 + static_cast<double>(s)));
    try {
      run.losses.push_back(
          pipe.train_step(data[s].x, data[s].y, loss, adam, {.max_grad_norm = max_grad_norm})
              .loss);
    } catch (const std::out_of_range&) {  // a bad target: the step updated nothing
      run.losses.push_back(-1.0);
    }
  }
  run.model_state = pipe.module().state_dict();
  run.optimizer_state = adam.state_dict();
  run.replays = pipe.graph_replays();
  run.captures = pipe.graph_captures();
  run.pool_bytes = pipe.graph_pool_bytes();
  return run;
}

void check_equal(const Run& graphed, const Run& eager) {
  REQUIRE(graphed.losses.size() == eager.losses.size());
  for (size_t s = 0; s < eager.losses.size(); ++s) {
    INFO("step " << s);
    CHECK(graphed.losses[s] == eager.losses[s]);
  }
  REQUIRE(graphed.model_state.size() == eager.model_state.size());
  for (size_t i = 0; i < eager.model_state.size(); ++i) {
    INFO(eager.model_state[i].first);
    check_bitwise_equal(graphed.model_state[i].second, eager.model_state[i].second);
  }
  REQUIRE(graphed.optimizer_state.size() == eager.optimizer_state.size());
  for (size_t i = 0; i < eager.optimizer_state.size(); ++i) {
    INFO(eager.optimizer_state[i].first);
    check_bitwise_equal(graphed.optimizer_state[i].second, eager.optimizer_state[i].second);
  }
}

TEST_CASE("graphed training steps equal eager ones bit for bit, every schedule",
          "[cuda][pipe][graph]") {
  if (!gpu_available_or_skip()) return;
  const Config config = GENERATE(Config{"gpipe", 1, 1, Checkpoint::kExceptLast},
                                 Config{"gpipe", 2, 1, Checkpoint::kAlways},
                                 Config{"1f1b", 2, 1, Checkpoint::kNever},
                                 Config{"1f1b", 2, 1, Checkpoint::kExceptLast},
                                 Config{"interleaved-1f1b", 2, 2, Checkpoint::kNever},
                                 Config{"zb-h1", 2, 1, Checkpoint::kNever},
                                 Config{"zb-h2", 2, 1, Checkpoint::kExceptLast},
                                 Config{"zb-v", 2, 2, Checkpoint::kNever},
                                 Config{"dualpipev", 2, 2, Checkpoint::kNever});
  INFO(config.schedule << ", " << config.workers << " worker(s), v " << config.virtual_stages);
  const std::vector<Batch> data = batches(kLongRun);
  const Run eager = train(config, false, data);
  const Run graphed = train(config, true, data);
  CHECK(graphed.captures == 1);
  CHECK(graphed.replays == kLongRun - 1);  // every step but the first: the capture's own too
  CHECK(graphed.pool_bytes > 0);
  CHECK(eager.replays == 0);
  check_equal(graphed, eager);
}

// Note [A step over devices] (pipeline/step_graph.h): stages on cuda:0 and cuda:1, one graph
// over both; under cudasim each replayed op runs on its own device and the race detector
// checks the replays against the eager work around them.
TEST_CASE("a step over two GPUs is one graph, bit for bit the eager steps", "[cuda][pipe][graph]") {
  if (!gpus_available_or_skip(2)) return;
  const Config config = GENERATE(Config{"gpipe", 2, 1, Checkpoint::kAlways, 2},
                                 Config{"1f1b", 2, 1, Checkpoint::kExceptLast, 2},
                                 Config{"zb-h1", 2, 1, Checkpoint::kNever, 2},
                                 Config{"interleaved-1f1b", 2, 2, Checkpoint::kNever, 2},
                                 Config{"dualpipev", 2, 2, Checkpoint::kNever, 2});
  INFO(config.schedule << ", v " << config.virtual_stages);
  const std::vector<Batch> data = batches(24);
  const Run eager = train(config, false, data);
  const Run graphed = train(config, true, data);
  CHECK(graphed.captures == 1);
  CHECK(graphed.replays == 23);
  CHECK(graphed.pool_bytes > 0);
  check_equal(graphed, eager);
  if (config.schedule == "1f1b") {
    // Dropout's seed slots, clipping's norm over both devices and SGD's learning rate, each
    // read on its own device.
    const std::vector<Batch> short_data = batches(6);
    for (bool sgd : {false, true}) {
      const Run eager_more = train(config, false, short_data, 0.25, 0.05, sgd);
      const Run graphed_more = train(config, true, short_data, 0.25, 0.05, sgd);
      CHECK(graphed_more.replays == 5);
      check_equal(graphed_more, eager_more);
    }
    // A replay that fails (a target out of range, found by the last stage on cuda:1) changes
    // nothing on either device: the gate reaches both.
    std::vector<Batch> bad = batches(6);
    std::vector<int64_t> y = bad[3].y.to_vector<int64_t>();
    y[5] = 7;
    bad[3].y = Tensor::from_vector(y, bad[3].y.shape());
    const Run eager_bad = train(config, false, bad, 0.25);
    const Run graphed_bad = train(config, true, bad, 0.25);
    CHECK(eager_bad.losses[3] == -1.0);
    CHECK(graphed_bad.captures == 2);
    check_equal(graphed_bad, eager_bad);
  }
}

// A GPT whose token embedding (stage 0, cuda:0) and LM head (stage 1, cuda:1) are tied
// (PipeOptions::tied_parameters): the gradients' sum crosses the devices inside the graph.
TEST_CASE("a GPT with tied weights over two GPUs: graphed steps equal eager ones, the copies "
          "stay equal", "[cuda][pipe][graph]") {
  if (!gpus_available_or_skip(2)) return;
  auto train_gpt = [](bool graphs) {
    constexpr int64_t kVocab = 11, kDim = 8, kBatch = 4, kSeq = 5;
    Generator generator(17);
    GeneratorGuard guard(generator);
    nn::Sequential gpt(nn::Embedding(kVocab, kDim), nn::TransformerBlock(kDim, 2),
                       nn::TransformerBlock(kDim, 2), nn::LayerNorm(kDim),
                       nn::Linear(kDim, kVocab, /*bias=*/false));
    Pipe pipe(std::move(gpt), PipeOptions{.balance = {3, 2},
                                          .devices = {Device::cuda(0), Device::cuda(1)},
                                          .chunks = 2,
                                          .schedule = {.name = "1f1b"},
                                          .cuda_graphs = graphs,
                                          .tied_parameters = {{"0.weight", "4.weight"}}});
    nn::AdamW adamw(pipe.parameters(), {.lr = 1e-2, .weight_decay = 1e-2});
    const pipeline::LossFn loss = [](const Tensor& logits, const Tensor& target) {
      return nn::cross_entropy(autograd::reshape(logits, Shape{target.numel(), kVocab}),
                               autograd::reshape(target, Shape{target.numel()}));
    };
    Run run;
    for (int s = 0; s < kSteps; ++s) {
      std::vector<int64_t> xs, ys;  // a text's next token is its target
      for (int64_t i = 0; i < kBatch * kSeq; ++i) {
        xs.push_back((i * 7 + s * 3) % kVocab);
        ys.push_back((i * 7 + s * 3 + 5) % kVocab);
      }
      const Tensor x = Tensor::from_vector(xs, {kBatch, kSeq});
      const Tensor y = Tensor::from_vector(ys, {kBatch, kSeq});
      adamw.set_lr(1e-2 / (1.0 + static_cast<double>(s)));
      run.losses.push_back(pipe.train_step(x, y, loss, adamw, {.max_grad_norm = 0.5}).loss);
    }
    run.model_state = pipe.module().state_dict();
    run.optimizer_state = adamw.state_dict();
    run.replays = pipe.graph_replays();
    run.captures = pipe.graph_captures();
    return run;
  };
  const Run eager = train_gpt(false), graphed = train_gpt(true);
  CHECK(graphed.captures == 1);
  CHECK(graphed.replays == kSteps - 1);
  check_equal(graphed, eager);
  const auto find = [&](const std::string& name) {
    for (const auto& [n, t] : graphed.model_state) {
      if (n == name) return t;
    }
    FAIL("no " << name);
    return Tensor();
  };
  check_bitwise_equal(find("4.weight").to(Device::cpu()), find("0.weight").to(Device::cpu()));
}

TEST_CASE("dropout in a graph draws every step's own mask; another kind of step runs eagerly",
          "[cuda][pipe][graph]") {
  if (!gpu_available_or_skip()) return;
  SECTION("dropout: each replay reads its step's keyed seed from a slot, recompute included") {
    const std::vector<Batch> data = batches(6);
    for (Checkpoint checkpoint : {Checkpoint::kNever, Checkpoint::kAlways}) {
      const Config config{"1f1b", 2, 1, checkpoint};
      const Run eager = train(config, false, data, 0.25);
      const Run graphed = train(config, true, data, 0.25);
      CHECK(graphed.captures == 1);
      CHECK(graphed.replays == 5);
      check_equal(graphed, eager);
    }
  }
  const Config config{"1f1b", 2, 1, Checkpoint::kExceptLast};
  SECTION("clipping by the gradients' global norm, on the device inside the graph") {
    const std::vector<Batch> data = batches(6);
    const Run eager = train(config, false, data, 0.25, 0.05);
    const Run graphed = train(config, true, data, 0.25, 0.05);
    const Run unclipped = train(config, true, data, 0.25, 0.0);
    CHECK(graphed.captures == 1);
    CHECK(graphed.replays == 5);
    check_equal(graphed, eager);
    CHECK_FALSE(graphed.losses.back() == unclipped.losses.back());  // it clipped
  }
  SECTION("SGD with Nesterov momentum: its learning rate a slot too") {
    const std::vector<Batch> data = batches(6);
    const Run eager = train(config, false, data, 0.25, 0.0, true);
    const Run graphed = train(config, true, data, 0.25, 0.0, true);
    CHECK(graphed.captures == 1);
    CHECK(graphed.replays == 5);
    check_equal(graphed, eager);
  }
  SECTION("a replayed step that fails (a target out of range) changes nothing, as the eager "
          "one") {
    std::vector<Batch> data = batches(6);
    std::vector<int64_t> y = data[3].y.to_vector<int64_t>();
    y[5] = 7;  // 3 classes: cross_entropy's deferred check fails (found after the launch)
    data[3].y = Tensor::from_vector(y, data[3].y.shape());
    const Run eager = train(config, false, data, 0.25);
    const Run graphed = train(config, true, data, 0.25);
    CHECK(eager.losses[3] == -1.0);
    // 0 eager, 1 captured, 2 replayed, 3 replayed and failed (the graph dropped), 4 eager,
    // 5 captured
    CHECK(graphed.captures == 2);
    CHECK(graphed.replays == 3);
    check_equal(graphed, eager);
  }
  SECTION("a step that cannot be captured (a host copy in a forward) runs eagerly, every step") {
    const std::vector<Batch> data = batches(5);
    auto run = [&](bool graphs) {
      Generator init(5);
      GeneratorGuard guard(init);
      Pipe pipe(nn::Sequential(nn::Linear(4, 8), AddHostConstant(), nn::ReLU(), nn::Linear(8, 3)),
                PipeOptions{.balance = {2, 2},
                            .devices = {gpu(), gpu()},
                            .chunks = 2,
                            .cuda_graphs = graphs});
      nn::AdamW adamw(pipe.parameters(), {.lr = 1e-2});
      std::vector<double> losses;
      for (const Batch& b : data) {
        losses.push_back(pipe.train_step(b.x, b.y, nn::cross_entropy, adamw).loss);
      }
      CHECK(pipe.graph_captures() == 0);
      CHECK(pipe.graph_replays() == 0);
      return losses;
    };
    CHECK(run(true) == run(false));
  }
  SECTION("a smaller last batch is another kind: eager, then the graph starts over") {
    std::vector<Batch> data = batches(6);
    data[3].x = data[3].x.slice(0, 12).contiguous();
    data[3].y = data[3].y.slice(0, 12).contiguous();
    const Run eager = train(config, false, data);
    const Run graphed = train(config, true, data);
    // steps 0 eager, 1 captured, 2 replayed; 3 (12 rows) eager; 4 (16 rows) eager; 5 captured
    CHECK(graphed.captures == 2);
    CHECK(graphed.replays == 3);
    check_equal(graphed, eager);
  }
}

TEST_CASE("fp16 with a GradScaler in the graph: an overflowing replay updates nothing on any "
          "stage, and the scale moves as in the eager steps", "[cuda][pipe][graph]") {
  if (!gpu_available_or_skip()) return;
  const int gpus = GENERATE(1, 2);  // 2: the stages on cuda:0 and cuda:1, one graph over both
  if (gpus == 2 && !gpus_available_or_skip(2)) return;
  INFO(gpus << " GPU(s)");
  const std::vector<Batch> data = batches(kSteps);
  struct Scaled {
    Run run;
    std::vector<char> skipped;
    std::vector<double> scales;  // before each step
    nn::NamedTensors state_before_skip, state_after_skip;
  };
  auto train_scaled = [&](bool graphs) {
    Pipe pipe(model(0.25), PipeOptions{.balance = {4, 3},
                                       .devices = {gpu(), Device::cuda(gpus - 1)},
                                       .chunks = 4,
                                       .schedule = {.name = "1f1b"},
                                       .precision = autograd::Precision::kFloat16,
                                       .cuda_graphs = graphs,
                                       .deferred_batch_norm = true});
    nn::AdamW adamw(pipe.parameters(), {.lr = 1e-2, .weight_decay = 1e-2});
    // float16's gradients hold at 2^16 and overflow at 2^28 (its largest value is 65504):
    // every clean step grows the scale to 2^28, every overflow backs it off to 2^16.
    nn::GradScaler scaler({.init_scale = 65536.0,
                           .growth_factor = 4096.0,
                           .backoff_factor = 1.0 / 4096.0,
                           .growth_interval = 1});
    Scaled out;
    for (size_t s = 0; s < data.size(); ++s) {
      adamw.set_lr(1e-2 / (1.0 + static_cast<double>(s)));
      out.scales.push_back(scaler.scale());
      if (s == 5) out.state_before_skip = adamw.state_dict();
      const pipeline::StepResult r =
          pipe.train_step(data[s].x, data[s].y, nn::cross_entropy, adamw,
                          {.max_grad_norm = 1.0, .grad_scaler = &scaler});
      if (s == 5) out.state_after_skip = adamw.state_dict();
      out.run.losses.push_back(r.loss);
      out.skipped.push_back(r.skipped ? 1 : 0);
    }
    out.run.model_state = pipe.module().state_dict();
    out.run.optimizer_state = adamw.state_dict();
    out.run.replays = pipe.graph_replays();
    out.run.captures = pipe.graph_captures();
    return out;
  };
  const Scaled eager = train_scaled(false), graphed = train_scaled(true);
  CHECK(graphed.run.captures == 1);
  CHECK(graphed.run.replays == kSteps - 1);
  CHECK(graphed.skipped == eager.skipped);
  CHECK(graphed.scales == eager.scales);
  // Not vacuous: steps 1, 3, 5, ... overflowed (in the graph: the capture's own launch too).
  for (size_t s = 0; s < eager.skipped.size(); ++s) {
    INFO("step " << s);
    CHECK(eager.skipped[s] == (s % 2 == 1 ? 1 : 0));
  }
  for (const Scaled* run : {&eager, &graphed}) {  // Adam's state (step count too) kept
    REQUIRE(run->state_after_skip.size() == run->state_before_skip.size());
    for (size_t i = 0; i < run->state_before_skip.size(); ++i) {
      check_bitwise_equal(run->state_after_skip[i].second, run->state_before_skip[i].second);
    }
  }
  check_equal(graphed.run, eager.run);
}

}  // namespace
}  // namespace pipewright::testing
