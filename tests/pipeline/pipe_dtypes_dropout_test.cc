// A Pipe against the plain model beyond float32 and deterministic layers: a parameter shared
// across workers is refused; a float64 Pipe; several optimizer steps of a Pipe equal plain
// training; int64 targets through train_step; the measured bubble; Dropout in a Pipe against
// the plain model (BatchNorm: pipe_batch_norm_test.cc).
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "autograd/shape_ops.h"
#include "nn/activation.h"
#include "nn/dropout.h"
#include "nn/random_key.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "pipeline/pipe.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

TEST_CASE("a parameter shared by stages on different workers is refused, naming both") {
  auto shared = std::make_shared<nn::Linear>(4, 4);
  nn::Sequential inner;
  inner.push_back_shared(shared);
  nn::Sequential model;
  model.push_back_shared(shared);
  model.push_back(nn::ReLU());
  model.push_back(std::move(inner));  // the same Linear again, one level down
  REQUIRE_THROWS_WITH(Pipe(std::move(model), {.balance = {2, 1}, .devices = cpus(0, 2)}),
                      Catch::Contains("is shared with stage 0, which runs on another worker"));
}

TEST_CASE("a float64 Pipe equals the float64 plain model over several SGD steps") {
  auto build = [] {
    Generator g(5);
    GeneratorGuard guard(g);
    return nn::Sequential(nn::Linear(4, 8, true, {.dtype = DType::kFloat64}), nn::Tanh(),
                          nn::Linear(8, 3, true, {.dtype = DType::kFloat64}));
  };
  Tensor x = Tensor::empty({12, 4}, {.dtype = DType::kFloat64});
  Tensor y = Tensor::empty({12, 3}, {.dtype = DType::kFloat64});
  Generator g(6);
  g.normal_(x);
  g.normal_(y);

  nn::Sequential plain = build();
  nn::SGD plain_opt(plain.parameters(), {.lr = 0.1, .momentum = 0.9});
  Pipe pipe(build(), {.balance = {2, 1}, .devices = cpus(0, 2), .chunks = 3,
                      .schedule = {.name = "1f1b"}});
  nn::SGD pipe_opt(pipe.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 5; ++step) {
    CAPTURE(step);
    plain_opt.zero_grad();
    nn::mse_loss(plain.forward(x), y).backward();
    plain_opt.step();
    pipe_opt.zero_grad();
    const StepResult r = pipe.train_step(x, y, [](const Tensor& out, const Tensor& t) {
      return nn::mse_loss(out, t.to(out.device()));
    });
    REQUIRE(std::isfinite(r.loss));
    pipe_opt.step();
    const auto a = plain.parameters(), b = pipe.parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      REQUIRE(a[i].dtype() == DType::kFloat64);
      REQUIRE(b[i].dtype() == DType::kFloat64);
      REQUIRE(max_diff(a[i], b[i].to(Device::cpu(0))) <= 1e-12);  // float64: micro-batch sums
    }
  }
}

TEST_CASE("int64 class targets through train_step; the bubble is measured") {
  Pipe pipe(small_mlp(3), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 4});
  const Tensor x = randn({8, 4}, 4);
  const Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 2, 1}, Shape{8});
  const StepResult r = pipe.train_step(x, y, [](const Tensor& out, const Tensor& t) {
    return nn::cross_entropy(out, t.to(out.device()));
  });
  // The whole-batch loss of the plain model.
  nn::Sequential plain = small_mlp(3);
  const double expected = nn::cross_entropy(plain.forward(x), y).item();
  REQUIRE(r.loss == Approx(expected).epsilon(1e-6));
  // Two stages, four micro-batches: idle time exists and is below the whole step.
  const double bubble = pipe.last_trace().bubble_fraction();
  REQUIRE(bubble > 0.0);
  REQUIRE(bubble < 1.0);
  REQUIRE(r.trace.bubble_fraction() == bubble);
}

TEST_CASE("Dropout in a Pipe equals the plain model under the step's random key") {
  // pipe.h / docs/pipeline.md ("Randomness"): every Dropout draws its mask keyed by (seed,
  // step, layer, sample) (Note [Keyed randomness]), whatever worker runs it, in whatever
  // order, and a recompute replays the same draws. The reference: the plain model on the
  // whole batch under the Pipe's key for the step; one MSE over the batch.
  const Checkpoint mode = GENERATE(Checkpoint::kAlways, Checkpoint::kNever);
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b");
  CAPTURE(to_string(mode), schedule);
  auto build = [] {
    Generator g(21);
    GeneratorGuard guard(g);
    return nn::Sequential(nn::Linear(4, 16), nn::ReLU(), nn::Dropout(0.5), nn::Linear(16, 16),
                          nn::Tanh(), nn::Dropout(0.3), nn::Linear(16, 3));
  };
  nn::Sequential plain = build();
  Pipe pipe(build(), {.balance = {3, 4}, .devices = cpus(0, 2), .chunks = 4,
                      .schedule = {.name = schedule, .recompute = mode}});
  const Tensor x = randn({16, 4}, 22), t = randn({16, 3}, 23);

  Tensor ref_loss;
  {
    nn::RandomKeyGuard key(pipe.random_key());
    ref_loss = nn::mse_loss(plain.forward(x), t);
  }
  ref_loss.backward();

  const StepResult r = pipe.train_step(x, t, [](const Tensor& out, const Tensor& y) {
    return nn::mse_loss(out, y.to(out.device()));
  });
  REQUIRE(std::abs(r.loss - ref_loss.item()) <= 1e-6);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= 1e-5);
  // Keyed draws take nothing from the workers' generators.
  REQUIRE(pipe.generator(0).offset() == 0);
  REQUIRE(pipe.generator(1).offset() == 0);

  // The masks matter: without dropout (eval) the loss is another number.
  plain.eval();
  REQUIRE(std::abs(nn::mse_loss(plain.forward(x), t).item() - r.loss) > 1e-3);
}
