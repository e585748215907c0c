// Note [A loss without history] (pipeline/stage_fn.cc): a step that could train nothing is
// refused, in the Pipe as in the plain model, never run to a plausible loss.
//   - a loss_fn that drops the history (Tensor::reshape, detach, to(dtype)) throws before any
//     backward, under every registered schedule, checkpointed or not: no .grad is touched;
//   - a stage whose outputs get no gradient back from the stages after it throws, naming it;
//   - an output that the next stage does not use takes no part in the backward: a parameter
//     reached only through it keeps an undefined .grad, as in the plain model (never zeros).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "autograd/shape_ops.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule/registry.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

namespace {

// A classifier loss as a user porting `logits.view(-1, V)` writes it, with Tensor's own
// reshape (no history), and the correct one.
Tensor ported_loss(const Tensor& out, const Tensor& y) {
  return nn::cross_entropy(out.reshape({-1, 3}), y);
}
Tensor correct_loss(const Tensor& out, const Tensor& y) {
  return nn::cross_entropy(autograd::reshape(out, {-1, 3}), y);
}

Tensor class_targets(int64_t n) {
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) y.push_back(i % 3);
  return Tensor::from_vector(y, {n});
}

// `stages` balance entries over small_mlp's 5 children, the first ones longest.
std::vector<int> spread(int stages) {
  std::vector<int> balance(static_cast<size_t>(stages), 5 / stages);
  for (int i = 0; i < 5 % stages; ++i) ++balance[static_cast<size_t>(i)];
  return balance;
}

// Identity in value, through Tensor::reshape: its output has no history (a layer ported
// with the non-differentiable call).
class ReshapeWithoutHistory : public nn::Module {
 public:
  using nn::Module::forward;
  Tensor forward(const Tensor& x) override { return x.reshape(x.shape()); }
  std::string str() const override { return "ReshapeWithoutHistory()"; }
};

// x -> (first(x), second(x)).
class TwoHeads : public nn::Module {
 public:
  TwoHeads() {
    first_ = register_module("first", std::make_shared<nn::Linear>(4, 8));
    second_ = register_module("second", std::make_shared<nn::Linear>(4, 8));
  }
  using nn::Module::forward;
  nn::Tensors forward(const nn::Tensors& in) override {
    return {(*first_)(in.at(0)), (*second_)(in.at(0))};
  }
  std::string str() const override { return "TwoHeads()"; }

 private:
  std::shared_ptr<nn::Linear> first_, second_;
};

// (a, b) -> a: the second input is not used.
class TakeFirst : public nn::Module {
 public:
  using nn::Module::forward;
  nn::Tensors forward(const nn::Tensors& in) override { return {in.at(0)}; }
  std::string str() const override { return "TakeFirst()"; }
};

nn::Sequential two_heads_model(uint64_t seed) {
  Generator g(seed);
  GeneratorGuard guard(g);
  nn::Sequential m;
  m.push_back(TwoHeads());
  m.push_back(TakeFirst());
  m.push_back(nn::Linear(8, 3));
  return m;
}

}  // namespace

TEST_CASE("a loss without history is refused under every schedule, before any backward") {
  const Tensor x = randn({8, 4}, 1), y = class_targets(8);
  int ran = 0;
  for (const ScheduleInfo& row : registered_schedules()) {
    for (int workers : {1, 2}) {
      for (Checkpoint mode : {Checkpoint::kNever, Checkpoint::kAlways}) {
        const int v = row.virtual_stages.clamp(2);
        PipeOptions options{.balance = spread(workers * v),
                            .devices = cpus(0, workers),
                            .chunks = 4,
                            .schedule = {.name = row.name, .virtual_stages = v, .recompute = mode}};
        CAPTURE(row.name, workers, v, to_string(mode));
        Pipe pipe(small_mlp(2), options);
        REQUIRE_THROWS_WITH(pipe.train_step(x, y, ported_loss),
                            Catch::Contains("has no autograd history, though the stage's "
                                            "outputs have one: loss_fn dropped it") &&
                                Catch::Contains("autograd::reshape"));
        // The first loss is made before any backward can start: nothing was accumulated.
        for (const Tensor& p : pipe.parameters()) REQUIRE_FALSE(p.grad().defined());
        // The same Pipe trains with the differentiable reshape.
        pipe.train_step(x, y, correct_loss);
        for (const Tensor& p : pipe.parameters()) REQUIRE(p.grad().defined());
        ++ran;
      }
    }
  }
  REQUIRE(ran == 4 * static_cast<int>(registered_schedules().size()));
}

TEST_CASE("detach and to(dtype) inside a loss are refused too") {
  const Tensor x = randn({8, 4}, 3), y = randn({8, 3}, 4);
  // Not checkpointed: micro-batch 0's loss is recorded, and checked, in its F (a checkpointed
  // cell's loss is checked in its R, the first time it is recorded).
  Pipe pipe(small_mlp(5), {.balance = {2, 3},
                           .devices = cpus(0, 2),
                           .chunks = 2,
                           .schedule = {.recompute = Checkpoint::kNever}});
  const auto detached = [](const Tensor& out, const Tensor& t) {
    return nn::mse_loss(out.detach(), t);
  };
  const auto converted = [](const Tensor& out, const Tensor& t) {
    return nn::mse_loss(out.to(DType::kFloat64), t.to(DType::kFloat64));
  };
  REQUIRE_THROWS_WITH(pipe.train_step(x, y, detached),
                      Catch::StartsWith("train_step: the loss of micro-batch 0 (last stage, 1) "
                                        "has no autograd history"));
  REQUIRE_THROWS_WITH(pipe.train_step(x, y, converted), Catch::Contains("loss_fn dropped it"));
  REQUIRE(pipe.last_failure().has_value());
  REQUIRE(pipe.last_failure()->action == Action{1, ActionKind::kForward, 0});
}

TEST_CASE("the plain model's backward names Tensor's methods as the likely cause") {
  nn::Sequential model = small_mlp(6);
  const Tensor loss = ported_loss(model.forward(randn({4, 4}, 7)), class_targets(4));
  REQUIRE_THROWS_WITH(loss.backward(), Catch::Contains("does not require grad") &&
                                           Catch::Contains("Tensor's own methods (reshape") &&
                                           Catch::Contains("autograd::reshape"));
}

TEST_CASE("a stage whose outputs get no gradient back is refused, naming it") {
  // Stage 1 starts with a layer that drops the history, so the loss has history (through
  // stage 1's Linear) but stage 0 would get no gradient: the plain model would leave stage
  // 0's parameters untrained, silently.
  const Checkpoint mode = GENERATE(Checkpoint::kNever, Checkpoint::kAlways);
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "zb-h1");
  CAPTURE(to_string(mode), schedule);
  Generator g(8);
  GeneratorGuard guard(g);
  nn::Sequential model;
  model.push_back(nn::Linear(4, 8));
  model.push_back(ReshapeWithoutHistory());
  model.push_back(nn::Linear(8, 3));
  Pipe pipe(std::move(model), {.balance = {1, 2},
                               .devices = cpus(0, 2),
                               .chunks = 2,
                               .schedule = {.name = schedule, .recompute = mode}});
  const Tensor x = randn({4, 4}, 9), y = randn({4, 3}, 10);
  REQUIRE_THROWS_WITH(
      pipe.train_step(x, y, nn::mse_loss),
      Catch::StartsWith("backward: stage 0, micro-batch ") &&
          Catch::Contains("got a gradient from the stages after it") &&
          Catch::Contains("set requires_grad(false) on the earlier stages' parameters"));
  // Freezing stage 0 on purpose is what the message offers, and it trains.
  for (Tensor p : pipe.partitions()[0].parameters()) p.set_requires_grad(false);
  pipe.zero_grad();
  pipe.train_step(x, y, nn::mse_loss);
  for (const Tensor& p : pipe.partitions()[1].parameters()) REQUIRE(p.grad().defined());
}

TEST_CASE("an output the next stage does not use leaves its parameters without a gradient") {
  // TwoHeads' second Linear reaches the loss only through the output TakeFirst drops: in the
  // plain model its .grad stays undefined; the pipeline gave it zeros before, now the same.
  const Checkpoint mode = GENERATE(Checkpoint::kNever, Checkpoint::kAlways);
  CAPTURE(to_string(mode));
  const Tensor x = randn({8, 4}, 11), y = randn({8, 3}, 12);
  nn::Sequential plain = two_heads_model(13);
  nn::mse_loss(plain.forward(x), y).backward();
  Pipe pipe(two_heads_model(13),
            {.balance = {1, 2}, .devices = cpus(0, 2), .chunks = 4,
             .schedule = {.recompute = mode}});
  pipe.train_step(x, y, nn::mse_loss);
  const nn::NamedTensors a = plain.named_parameters(), b = pipe.module().named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    const bool unused = a[i].first.rfind("0.second.", 0) == 0;
    REQUIRE(a[i].second.grad().defined() == !unused);
    REQUIRE(b[i].second.grad().defined() == !unused);
  }
  REQUIRE(max_grad_diff(pipe.module(), plain) < 1e-6);
}
