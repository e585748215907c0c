// Checkpointing: how many recomputes each mode runs, and that a recompute replays the
// forward exactly (Dropout masks from the saved RNG state) without consuming randomness.
#include <catch2/catch.hpp>

#include "autograd/grad_mode.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "tensor/ops.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

namespace {

Tensor mse(const Tensor& out, const Tensor& t) { return nn::mse_loss(out, t.to(out.device())); }

// Linear Dropout Linear Dropout Linear, from `seed`.
nn::Sequential dropout_mlp(uint64_t seed) {
  Generator g(seed);
  GeneratorGuard guard(g);
  return nn::Sequential(nn::Linear(4, 16), nn::Dropout(0.5), nn::Linear(16, 16),
                        nn::Dropout(0.3), nn::Linear(16, 3));
}

int expected_recomputes(Checkpoint mode, int m) {
  return mode == Checkpoint::kAlways ? m : mode == Checkpoint::kExceptLast ? m - 1 : 0;
}

}  // namespace

TEST_CASE("recomputes per stage: always m, except_last m-1, never 0") {
  const Checkpoint mode =
      GENERATE(Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever);
  const int64_t batch = GENERATE(8, 3);  // 3 rows in 4 chunks: m = 3 micro-batches
  CAPTURE(to_string(mode), batch);
  const int m = static_cast<int>(std::min<int64_t>(batch, 4));
  Pipe pipe(small_mlp(1), {.balance = {2, 2, 1}, .devices = cpus(0, 3), .chunks = 4,
                           .schedule = {.recompute = mode}});
  const Tensor x = randn({batch, 4}, 2), t = randn({batch, 3}, 3);

  mse(pipe.forward(x), t).backward();
  StepCounters c = pipe.last_counters();
  REQUIRE(c.forwards == std::vector<int>(3, m));
  REQUIRE(c.recomputes == std::vector<int>(3, expected_recomputes(mode, m)));
  REQUIRE(c.backwards == std::vector<int>(3, m));

  StepResult r = pipe.train_step(x, t, mse, {.schedule = named_schedule(pipe, x, "1f1b")});
  REQUIRE(r.counters.recomputes == std::vector<int>(3, expected_recomputes(mode, m)));
  REQUIRE(r.counters.backwards == std::vector<int>(3, m));
  StepResult z = pipe.train_step(x, t, mse, {.schedule = named_schedule(pipe, x, "zb-h1")});
  REQUIRE(z.counters.recomputes == std::vector<int>(3, expected_recomputes(mode, m)));
  REQUIRE(z.counters.weight_grads == std::vector<int>(3, m));
}

TEST_CASE("eval and no_grad forwards never checkpoint and keep no graph") {
  Pipe pipe(small_mlp(1), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 4,
                           .schedule = {.recompute = Checkpoint::kAlways}});
  {
    autograd::NoGradGuard no_grad;
    Tensor out = pipe.forward(randn({8, 4}, 2));
    REQUIRE(out.grad_fn() == nullptr);
    REQUIRE(pipe.last_counters().recomputes == std::vector<int>{0, 0});
  }
  // Eval mode with grad mode on: the same, and the output is the plain model's.
  pipe.eval();
  const Tensor x = randn({8, 4}, 3);
  Tensor out = pipe.forward(x);
  REQUIRE(out.grad_fn() == nullptr);
  REQUIRE(pipe.last_counters().recomputes == std::vector<int>{0, 0});
  REQUIRE(pipe.last_counters().forwards == std::vector<int>{4, 4});
  nn::Sequential plain = small_mlp(1);
  plain.eval();
  REQUIRE(max_diff(out, plain.forward(x)) <= 2e-6);  // micro-batched GEMMs
}

TEST_CASE("dropout: a checkpointed pipe equals a plain-tape pipe with the same RNG") {
  const std::string schedule = GENERATE(as<std::string>{}, "forward", "gpipe", "1f1b", "zb-h1");
  CAPTURE(schedule);
  auto make = [](Checkpoint mode, uint64_t seed) {
    return Pipe(dropout_mlp(7), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 4,
                                 .schedule = {.recompute = mode}, .seed = seed});
  };
  Pipe always = make(Checkpoint::kAlways, 42), never = make(Checkpoint::kNever, 42);
  Pipe other = make(Checkpoint::kNever, 43);
  const Tensor x0 = randn({8, 4}, 8), t = randn({8, 3}, 9);

  auto step = [&](Pipe& p) -> Tensor {  // returns the input gradient
    Tensor x = x0.clone().set_requires_grad(true);
    if (schedule == "forward") {
      mse(p.forward(x), t).backward();
    } else {
      p.train_step(x, t, mse, {.schedule = named_schedule(p, x, schedule)});
    }
    return x.grad();
  };
  Tensor gx_always = step(always), gx_never = step(never), gx_other = step(other);

  // Same masks in the checkpointed forward and its recompute: identical gradients, bit for bit.
  REQUIRE(ops::equal(gx_always, gx_never));
  for (size_t i = 0; i < always.parameters().size(); ++i) {
    REQUIRE(ops::equal(always.parameters()[i].grad(), never.parameters()[i].grad()));
  }
  // Dropout is really on: another seed gives other masks.
  REQUIRE(max_diff(gx_other, gx_never) > 1e-3);
  // Dropout's masks are keyed (Note [Keyed randomness]): the workers' streams are untouched.
  for (int w = 0; w < 2; ++w) {
    REQUIRE(always.generator(w).offset() == 0);
    REQUIRE(never.generator(w).offset() == 0);
  }
}

TEST_CASE("manual_seed makes a step reproducible") {
  Pipe pipe(dropout_mlp(3), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 2});
  const Tensor x = randn({4, 4}, 4);
  pipe.manual_seed(5);
  Tensor a = pipe.forward(x);
  Tensor b = pipe.forward(x);
  pipe.manual_seed(5);
  Tensor c = pipe.forward(x);
  REQUIRE(ops::equal(a, c));
  REQUIRE_FALSE(ops::equal(a, b));
}
