// Failure handling (Note [First exception wins] in runtime.h): an exception raised in any
// stage, in forward or in backward, reaches the caller with its original type and message;
// no worker is left blocked; the Pipe is usable afterwards; destroying Pipes joins threads.
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>

#include "autograd/functions.h"
#include "autograd/node.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

namespace {

nn::Sequential with_module(std::shared_ptr<nn::Module> extra, uint64_t seed) {
  nn::Sequential m = small_mlp(seed);  // 5 children
  nn::Sequential out;
  for (size_t i = 0; i < m.size(); ++i) {
    if (i == 3) out.push_back_shared(extra);  // between Linear(8,8) and Tanh
    out.push_back_shared(m.ptr(i));
  }
  return out;  // 6 children
}

Tensor mse(const Tensor& out, const Tensor& t) { return nn::mse_loss(out, t.to(out.device())); }

}  // namespace

TEST_CASE("an exception in a stage's forward reaches the caller unchanged") {
  const int throw_at = GENERATE(1, 2, 4);  // which forward call throws (micro-batch index + 1)
  const std::vector<int> balance = GENERATE(values<std::vector<int>>({{3, 3}, {2, 2, 2}, {6}}));
  CAPTURE(throw_at, balance);
  auto countdown = std::make_shared<std::atomic<int>>(throw_at);
  auto thrower = std::make_shared<ThrowInForward>(countdown, "stage exploded in forward");
  Pipe pipe(with_module(thrower, 1),
            {.balance = balance, .devices = cpus(0, 3), .chunks = 4});
  const Tensor x = randn({8, 4}, 2);

  REQUIRE_THROWS_MATCHES(pipe.forward(x), std::domain_error,
                         Catch::Message("stage exploded in forward"));
  // Disarmed (the countdown is past zero): the same Pipe works again, forward and backward.
  Tensor out = pipe.forward(x);
  REQUIRE(out.shape() == Shape{8, 3});
  mse(out, randn({8, 3}, 3)).backward();
  REQUIRE(pipe.last_counters().backwards == std::vector<int>(balance.size(), 4));
}

TEST_CASE("an exception in a stage's backward reaches loss.backward() unchanged") {
  const Checkpoint mode = GENERATE(Checkpoint::kNever, Checkpoint::kAlways);
  CAPTURE(to_string(mode));
  auto armed = std::make_shared<std::atomic<int>>(1);  // the first backward call throws
  auto thrower = std::make_shared<ThrowInBackward>(armed, "stage exploded in backward");
  Pipe pipe(with_module(thrower, 4),
            {.balance = {2, 2, 2}, .devices = cpus(0, 3), .chunks = 4,
             .schedule = {.recompute = mode}});
  const Tensor x = randn({8, 4}, 5), target = randn({8, 3}, 6);

  Tensor loss = mse(pipe.forward(x), target);
  REQUIRE_THROWS_MATCHES(loss.backward(), std::overflow_error,
                         Catch::Message("stage exploded in backward"));
  // The step was consumed: a second backward through it is a logic error, not a hang.
  REQUIRE_THROWS_AS(loss.backward(), std::logic_error);

  armed->store(0);  // disarmed
  pipe.zero_grad();
  mse(pipe.forward(x), target).backward();
  for (const Tensor& p : pipe.parameters()) REQUIRE(p.grad().defined());
}

TEST_CASE("an exception in train_step (stage or loss_fn) reaches the caller") {
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "zb-h1");
  CAPTURE(schedule);
  auto armed = std::make_shared<std::atomic<int>>(1);  // the first backward call throws
  auto thrower = [&armed] {
    return std::make_shared<ThrowInBackward>(armed, "stage exploded in backward");
  };
  Pipe pipe(with_module(thrower(), 7),
            {.balance = {3, 3}, .devices = cpus(0, 2), .chunks = 4,
             .schedule = {.name = schedule}});
  const Tensor x = randn({8, 4}, 8), target = randn({8, 3}, 9);
  REQUIRE_THROWS_MATCHES(pipe.train_step(x, target, mse), std::overflow_error,
                         Catch::Message("stage exploded in backward"));
  armed->store(0);  // disarmed

  int calls = 0;
  auto bad_loss = [&calls](const Tensor& out, const Tensor& t) -> Tensor {
    if (++calls == 3) throw std::invalid_argument("loss exploded");
    return mse(out, t);
  };
  pipe.zero_grad();
  REQUIRE_THROWS_MATCHES(pipe.train_step(x, target, bad_loss), std::invalid_argument,
                         Catch::Message("loss exploded"));
  // Where it began, and what .grad holds: the loss of micro-batch 2 failed in its forward on
  // the last stage. Under GPipe no backward had run, so every .grad is still unset; under
  // 1F1B / ZB-H1 the backwards of micro-batches 0 and 1 may have run: .grad then holds part of
  // the step (zero_grad() before the next one, as done here).
  const std::optional<Failure> f = pipe.last_failure();
  REQUIRE(f.has_value());
  REQUIRE(f->action.stage == 1);
  REQUIRE(f->what == "loss exploded");
  if (schedule == "gpipe") {  // F0 F1 F2: the third loss; others interleave recomputes (R)
    REQUIRE(f->action == Action{1, ActionKind::kForward, 2});
    for (const Tensor& p : pipe.parameters()) REQUIRE_FALSE(p.grad().defined());
  }
  pipe.zero_grad();
  StepResult r = pipe.train_step(x, target, mse);
  REQUIRE(r.microbatch_losses.size() == 4);
  // ...and equals a fresh Pipe's step.
  Pipe fresh(with_module(thrower(), 7),
             {.balance = {3, 3}, .devices = cpus(0, 2), .chunks = 4,
              .schedule = {.name = schedule}});
  REQUIRE(fresh.train_step(x, target, mse).microbatch_losses == r.microbatch_losses);
  REQUIRE(max_grad_diff(fresh.module(), pipe.module()) == 0);
}

TEST_CASE("backward after the Pipe is gone throws instead of touching dead workers") {
  Tensor loss;
  {
    Pipe pipe(small_mlp(10), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 2});
    loss = mse(pipe.forward(randn({4, 4}, 11)), randn({4, 3}, 12));
  }
  REQUIRE_THROWS_WITH(loss.backward(), Catch::Contains("destroyed"));
}

TEST_CASE("many Pipes created, used and destroyed; two alive at once") {
  for (int i = 0; i < 20; ++i) {
    Pipe a(small_mlp(13), {.balance = {1, 1, 1, 1, 1}, .devices = cpus(0, 5), .chunks = 3});
    Pipe b(small_mlp(14), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 2});
    Tensor x = randn({6, 4}, 15);
    Tensor loss = autograd::add(mse(a.forward(x), randn({6, 3}, 16)),
                                autograd::to(mse(b.forward(x), randn({6, 3}, 16)), Device::cpu(4)));
    loss.backward();  // one backward through two pipes' PipeBackward nodes
    REQUIRE(a.last_counters().backwards == std::vector<int>(5, 3));
    REQUIRE(b.last_counters().backwards == std::vector<int>{2, 2});
    for (const Tensor& p : a.parameters()) REQUIRE(p.grad().defined());
    for (const Tensor& p : b.parameters()) REQUIRE(p.grad().defined());
  }
  // A pipe whose forward output is never backpropagated is destroyed cleanly too.
  Tensor kept;
  {
    Pipe p(small_mlp(16), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 2});
    kept = p.forward(randn({4, 4}, 17));
  }
  REQUIRE(kept.shape() == Shape{4, 3});
}

TEST_CASE("a moved Pipe keeps working") {
  Pipe a(small_mlp(18), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 2});
  Pipe b = std::move(a);
  mse(b.forward(randn({4, 4}, 19)), randn({4, 3}, 20)).backward();
  REQUIRE(b.last_counters().backwards == std::vector<int>{2, 2});
}

TEST_CASE("a Pipe still alive at program exit is joined by static destruction") {
  // Function-local static: destroyed after main returns. The binary exiting normally (no
  // hang, no sanitizer report) is the assertion.
  static Pipe at_exit(small_mlp(21), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 2});
  static Tensor out = at_exit.forward(randn({4, 4}, 22));  // keeps a step alive too
  REQUIRE(out.grad_fn() != nullptr);
}

TEST_CASE("an input of another dtype names the layer it entered, and last_failure the stage") {
  Pipe pipe(small_mlp(12), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 2});
  const Tensor x = randn({4, 4}, 13).to(DType::kFloat64);
  REQUIRE_THROWS_MATCHES(
      pipe.forward(x), std::invalid_argument,
      Catch::Message("Linear(in_features=4, out_features=8, bias=true): the input ([2, 4] "
                     "float64 on cpu:0) does not match the weight ([8, 4] float32 on cpu:0): "
                     "the dtypes differ. Convert the input first: input.to(DType::kFloat32)"));
  REQUIRE(pipe.last_failure().has_value());
  REQUIRE(pipe.last_failure()->action.stage == 0);
  const Tensor wrong_target = Tensor::zeros({4, 3}, {.dtype = DType::kInt64});
  REQUIRE_THROWS_WITH(pipe.train_step(randn({4, 4}, 13), wrong_target, nn::mse_loss),
                      Catch::StartsWith("mse_loss: the target ([2, 3] int64 on cpu:1)") &&
                          Catch::EndsWith("Convert the target first: "
                                          "target.to(DType::kFloat32)"));
}
