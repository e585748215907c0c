// Construction errors (torchgpipe's, with C++ exception types and messages naming the values)
// and the structure a Pipe exposes.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule/generators.h"
#include "tensor/ops.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

TEST_CASE("balance errors name the values") {
  REQUIRE_THROWS_MATCHES(
      Pipe(small_mlp(1), {.balance = {1, 2}, .devices = cpus(0, 2)}), std::invalid_argument,
      Catch::Message("module and sum of balance have different length (module: 5, sum of "
                     "balance: 3)"));
  REQUIRE_THROWS_MATCHES(
      Pipe(small_mlp(1), {.balance = {3, 0, 2}, .devices = cpus(0, 3)}), std::invalid_argument,
      Catch::Message("all balance numbers must be positive integer (balance: [3, 0, 2])"));
  REQUIRE_THROWS_MATCHES(
      Pipe(small_mlp(1), {.balance = {}, .devices = cpus(0, 1)}), std::invalid_argument,
      Catch::Message("balance is required (got an empty balance): the number of children per "
                     "stage, e.g. {.balance = {3, 1}}; pipeline::balance_by_parameters(stages, "
                     "model) computes one, and pipeline::make_pipe derives it from where the "
                     "children are"));
  REQUIRE_THROWS_WITH(Pipe(small_mlp(1), {.balance = {2, 2, 1}, .devices = cpus(0, 3),
                                          .schedule = {.virtual_stages = 2}}),
                      Catch::Contains("multiple of virtual_stages"));
}

TEST_CASE("chunks must be positive") {
  REQUIRE_THROWS_MATCHES(
      Pipe(small_mlp(1), {.balance = {5}, .devices = cpus(0, 1), .chunks = 0}),
      std::invalid_argument, Catch::Message("number of chunks must be positive integer (chunks: 0)"));
  REQUIRE_THROWS_AS(Pipe(small_mlp(1), {.balance = {5}, .devices = cpus(0, 1), .chunks = -3}),
                    std::invalid_argument);
}

TEST_CASE("fewer devices than partitions is out_of_range naming both counts") {
  REQUIRE_THROWS_MATCHES(
      Pipe(small_mlp(1), {.balance = {2, 3}, .devices = cpus(0, 1)}), std::out_of_range,
      Catch::Message("too few devices to hold given partitions (devices: 1, partitions: 2)"));
}

TEST_CASE("the same module instance twice is refused") {
  auto relu = std::make_shared<nn::ReLU>();
  nn::Sequential m(nn::Linear(2, 2), relu, nn::Linear(2, 2), relu);
  REQUIRE_THROWS_MATCHES(Pipe(std::move(m), {.balance = {2, 2}, .devices = cpus(0, 2)}),
                         std::invalid_argument,
                         Catch::Message("module with duplicate children is not supported "
                                        "(child 3 is child 1)"));
}

TEST_CASE("structure: partitions, devices, balance; parameters moved to their devices") {
  Pipe pipe(small_mlp(1), {.balance = {2, 2, 1}, .devices = cpus(4, 3), .chunks = 2});
  REQUIRE(pipe.balance() == std::vector<int>{2, 2, 1});
  REQUIRE(pipe.num_workers() == 3);
  REQUIRE(pipe.stage_devices() == cpus(4, 3));
  REQUIRE(pipe.partitions().size() == 3);
  for (size_t s = 0; s < 3; ++s) {
    REQUIRE(pipe.partitions()[s].size() == static_cast<size_t>(pipe.balance()[s]));
    for (const Tensor& p : pipe.partitions()[s].parameters()) {
      REQUIRE(p.device() == Device::cpu(4 + static_cast<int>(s)));
    }
  }
  // The partitions share the module's children (slices, not copies).
  REQUIRE(&pipe.partitions()[1][0] == &pipe.module()[2]);
}

TEST_CASE("train/eval reaches every stage; eval keeps nothing for backward") {
  Pipe pipe(small_mlp(1), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 4,
                           .schedule = {.recompute = Checkpoint::kAlways}});
  pipe.eval();
  REQUIRE_FALSE(pipe.is_training());
  for (const auto& part : pipe.partitions()) REQUIRE_FALSE(part.is_training());
  Tensor out = pipe.forward(randn({8, 4}, 2).set_requires_grad(true));
  REQUIRE(out.grad_fn() == nullptr);
  REQUIRE_FALSE(out.requires_grad());
  nn::Sequential plain = small_mlp(1);  // the same weights
  plain.eval();
  REQUIRE(max_diff(out, plain.forward(randn({8, 4}, 2))) <= 2e-6);  // micro-batched GEMMs
  REQUIRE(pipe.last_counters().recomputes == std::vector<int>{0, 0});
  REQUIRE(pipe.last_counters().forwards == std::vector<int>{4, 4});
  pipe.train();
  REQUIRE(pipe.forward(randn({8, 4}, 2)).grad_fn() != nullptr);
}

TEST_CASE("schedules that do not fit the pipe are refused before running") {
  Pipe pipe(small_mlp(1), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 4});
  const Tensor x = randn({8, 4}, 2), t = randn({8, 3}, 3);
  Schedule s = make_schedule("1f1b", 2, 3);  // 3 micro-batches, the batch splits into 4
  auto mse = [](const Tensor& o, const Tensor& y) { return nn::mse_loss(o, y); };
  REQUIRE_THROWS_WITH(pipe.train_step(x, t, mse, {.schedule = s}),
                      Catch::Contains("3 micro-batches"));
  Schedule broken = make_schedule("gpipe", 2, 4);
  broken.actions[1].pop_back();  // drop B0@1
  REQUIRE_THROWS_AS(pipe.train_step(x, t, mse, {.schedule = broken}),
                    std::invalid_argument);
  REQUIRE_THROWS_AS(pipe.train_step(x, t, mse,
                                    {.schedule = named_schedule(pipe, x, "no-such-schedule")}),
                    std::invalid_argument);
  REQUIRE_THROWS_WITH(pipe.train_step(x, randn({7, 3}, 4), mse),
                      "target 0 of shape [7, 3] has 7 entries on dim 0, the batch has 8");
}

TEST_CASE("a schedule that interleaves virtual stages on a pipe without them says what to set") {
  const std::string message =
      "schedule 'interleaved-1f1b' interleaves several virtual stages per worker, but the pipe "
      "has virtual_stages = 1: set PipeOptions::schedule.virtual_stages to 2 or more (balance "
      "then has virtual_stages entries per worker), or use a schedule with one stage per worker "
      "('gpipe', '1f1b', 'zb-h1', 'zb-h2')";
  REQUIRE_THROWS_MATCHES(Pipe(small_mlp(1), {.balance = {2, 2, 1}, .devices = cpus(0, 3),
                                             .chunks = 8,
                                             .schedule = {.name = "interleaved-1f1b"}}),
                         std::invalid_argument, Catch::Message(message));
  Pipe pipe(small_mlp(1), {.balance = {2, 2, 1}, .devices = cpus(0, 3), .chunks = 8});
  const Tensor x = randn({10, 4}, 1), y = randn({10, 3}, 2);
  REQUIRE_THROWS_MATCHES(pipe.train_step(x, y, nn::mse_loss,
                                         {.schedule = named_schedule(pipe, x, "interleaved-1f1b")}),
                         std::invalid_argument, Catch::Message(message));
  for (const std::string name : {"interleaved-zb", "looped-bfs"}) {
    REQUIRE_THROWS_WITH(pipe.train_step(x, y, nn::mse_loss,
                                        {.schedule = named_schedule(pipe, x, name)}),
                        Catch::StartsWith("schedule '" + name + "' interleaves"));
  }
  // With virtual stages, the same schedule runs.
  Pipe interleaved(small_mlp(1), {.balance = {1, 1, 2, 1}, .devices = cpus(0, 2), .chunks = 4,
                                  .schedule = {.name = "interleaved-1f1b", .virtual_stages = 2}});
  REQUIRE(std::isfinite(interleaved.train_step(x.slice(0, 8), y.slice(0, 8), nn::mse_loss).loss));
}

TEST_CASE("a moved-from Pipe throws std::logic_error on use; assigning to it revives it") {
  Pipe pipe(small_mlp(1), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 2});
  Pipe owner = std::move(pipe);
  const Tensor x = randn({4, 4}, 1), y = randn({4, 3}, 2);
  const auto moved = Catch::Message("this Pipe was moved from (std::move): use the Pipe it was "
                                    "moved into");
  REQUIRE_THROWS_MATCHES(pipe.forward(x), std::logic_error, moved);
  REQUIRE_THROWS_MATCHES(pipe(x), std::logic_error, moved);
  REQUIRE_THROWS_MATCHES(pipe.train_step(x, y, nn::mse_loss), std::logic_error, moved);
  REQUIRE_THROWS_MATCHES(pipe.eval_step(x, y, nn::mse_loss), std::logic_error, moved);
  REQUIRE_THROWS_MATCHES(pipe.parameters(), std::logic_error, moved);
  REQUIRE_THROWS_AS(pipe.module(), std::logic_error);
  REQUIRE_THROWS_AS(pipe.balance(), std::logic_error);
  REQUIRE_THROWS_AS(pipe.stage_devices(), std::logic_error);
  REQUIRE_THROWS_AS(pipe.partitions(), std::logic_error);
  REQUIRE_THROWS_AS(pipe.num_stages(), std::logic_error);
  REQUIRE_THROWS_AS(pipe.zero_grad(), std::logic_error);
  REQUIRE_THROWS_AS(pipe.eval(), std::logic_error);
  REQUIRE_THROWS_AS(pipe.manual_seed(1), std::logic_error);
  REQUIRE_THROWS_AS(pipe.last_trace(), std::logic_error);
  REQUIRE(owner.forward(x).shape() == Shape{4, 3});  // the new owner works

  pipe = std::move(owner);
  REQUIRE(pipe.forward(x).shape() == Shape{4, 3});
  REQUIRE_THROWS_AS(owner.forward(x), std::logic_error);
}
