// StepOptions through the single-tensor train_step: every field reaches the step as it does
// through the tuple form (schedule, reduction, arguments, return_outputs,
// output_dims, first_sample, the input and target chunk specs), checked against the plain
// model; and a step's schedule is chosen in two places only: PipeOptions::schedule (a
// ScheduleSpec, built for each batch's micro-batch count), or StepOptions' Schedule value.
#include <catch2/catch.hpp>

#include <numeric>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "nn/arguments.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/random_key.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule/generators.h"
#include "tensor/generator.h"
#include "tests/compare.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;
using pipewright::testing::bitwise_equal;

namespace {

constexpr double kTol = 1e-5;  // float32 sums reassociated over micro-batches

// The summed squared error times the step's argument "scale": loss_fn reads the arguments
// as every stage does (nn::current_arguments()).
Tensor scaled_sum(const Tensor& out, const Tensor& target) {
  const double scale = nn::current_arguments().get<double>("scale");
  return autograd::mul(nn::mse_loss(out, target, autograd::Reduction::kSum), scale);
}

}  // namespace

TEST_CASE("the single-tensor train_step takes the schedule, reduction, arguments and outputs "
          "of StepOptions") {
  const Tensor x = randn({7, 4}, 1), y = randn({7, 3}, 2);
  const StepOptions options{.arguments = {{"scale", 0.25}},
                            .reduction = LossReduction::kSum,
                            .return_outputs = true,
                            .output_dims = {-2},
                            .schedule = make_schedule("1f1b", 2, 3)};
  nn::Sequential plain = small_mlp(5);
  const Tensor ref_out = plain.forward(x);
  Tensor ref_loss = autograd::mul(nn::mse_loss(ref_out, y, autograd::Reduction::kSum), 0.25);
  ref_loss.backward();

  Pipe pipe(small_mlp(5), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 3});
  const StepResult r = pipe.train_step(x, y, scaled_sum, options);
  REQUIRE(r.schedule.name == "1f1b");  // not the pipe's gpipe
  REQUIRE(r.microbatch_sizes == std::vector<int64_t>{3, 3, 1});
  // kSum: the micro-batches' losses add up, weight 1 each, to the whole batch's summed loss.
  REQUIRE(r.loss == Approx(std::accumulate(r.microbatch_losses.begin(),
                                           r.microbatch_losses.end(), 0.0)));
  REQUIRE(r.loss == Approx(ref_loss.item()).epsilon(kTol));
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
  REQUIRE(r.outputs.size() == 1);
  REQUIRE(max_diff(r.outputs[0], ref_out) <= kTol);
  REQUIRE_FALSE(r.outputs[0].requires_grad());

  // The same step through the tuple form: the same numbers, bit for bit.
  Pipe tuple(small_mlp(5), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 3});
  const StepResult t = tuple.train_step({x}, {y}, as_tuple_loss(scaled_sum), options);
  REQUIRE(t.microbatch_losses == r.microbatch_losses);
  REQUIRE(bitwise_equal(grads_of(tuple.module()), grads_of(pipe.module())));
  REQUIRE(bitwise_equal(t.outputs.at(0), r.outputs[0]));

  // Without the argument, loss_fn's own error reaches the caller.
  REQUIRE_THROWS_WITH(pipe.train_step(x, y, scaled_sum, {.reduction = LossReduction::kSum}),
                      Catch::Contains("no argument 'scale'"));
}

TEST_CASE("the single-tensor train_step cuts its input and target by their chunk specs") {
  Pipe pipe(small_mlp(5), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 2});
  const Tensor x = randn({4, 4}, 1), y = randn({4, 3}, 2);
  // Negative dims count from the end, as in PyTorch: split(-2) is dim 0 of both.
  const StepResult r = pipe.train_step(x, y, nn::mse_loss,
                                       {.input_chunks = {ChunkSpec::split(-2)},
                                        .target_chunks = {ChunkSpec::split(-2)}});
  REQUIRE(r.microbatch_sizes == std::vector<int64_t>{2, 2});
  REQUIRE_THROWS_WITH(
      pipe.train_step(x, y, nn::mse_loss, {.input_chunks = {ChunkSpec::split(2)}}),
      "pipeline input 0 of shape [4, 4] has no dim 2 to split on");
  REQUIRE_THROWS_WITH(
      pipe.train_step(x, y, nn::mse_loss, {.target_chunks = {ChunkSpec::split(1)}}),
      "target 0 of shape [4, 3] has 3 entries on dim 1, the batch has 4");
  REQUIRE_THROWS_WITH(
      pipe.train_step(x, y, nn::mse_loss, {.input_chunks = {ChunkSpec::replicate()}}),
      "every pipeline input is replicated (ChunkSpec::replicate): nothing to split");
  REQUIRE_THROWS_WITH(
      pipe.train_step(x, y, nn::mse_loss, {.input_chunks = {ChunkSpec(), ChunkSpec()}}),
      "2 chunk specs for 1 inputs");
}

TEST_CASE("the single-tensor train_step keys its random layers by first_sample",
          "[pipe][random]") {
  auto model = [] {
    Generator g(7);
    GeneratorGuard guard(g);
    return nn::Sequential(nn::Linear(4, 8), nn::Dropout(0.5), nn::Linear(8, 3));
  };
  const Tensor x = randn({6, 4}, 1), y = randn({6, 3}, 2);
  std::vector<double> losses;
  for (const int64_t first : {int64_t{0}, int64_t{5}}) {
    CAPTURE(first);
    nn::Sequential plain = model();
    double ref = 0;
    {
      nn::RandomKeyGuard key({.seed = 3, .step = 0, .first_sample = first});
      Tensor loss = nn::mse_loss(plain.forward(x), y);
      loss.backward();
      ref = loss.item();
    }
    Pipe pipe(model(), {.balance = {2, 1}, .devices = cpus(0, 2), .chunks = 3, .seed = 3});
    const StepResult r = pipe.train_step(x, y, nn::mse_loss, {.first_sample = first});
    REQUIRE(r.loss == Approx(ref).epsilon(kTol));
    REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
    losses.push_back(r.loss);
  }
  REQUIRE(losses[0] != losses[1]);  // the rows' indices moved, and so did their masks
}

TEST_CASE("a step runs the pipe's schedule, built for the batch's micro-batch count, or the one "
          "StepOptions gives") {
  Pipe pipe(small_mlp(1), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 4,
                           .schedule = {.name = "1f1b", .recompute = Checkpoint::kExceptLast}});
  const Tensor x = randn({8, 4}, 2), t = randn({8, 3}, 3);
  StepResult r = pipe.train_step(x, t, nn::mse_loss);
  REQUIRE(r.schedule.name == "1f1b");
  REQUIRE(r.counters.recomputes == std::vector<int>{3, 3});  // the pipe's checkpoint mode
  // A short batch (3 rows: 3 micro-batches) gets the same spec for its own count.
  r = pipe.train_step(randn({3, 4}, 4), randn({3, 3}, 5), nn::mse_loss);
  REQUIRE(r.schedule.num_microbatches == 3);
  REQUIRE(r.counters.recomputes == std::vector<int>{2, 2});
  r = pipe.train_step(x, t, nn::mse_loss, {.schedule = pipe.schedule_for(4, "zb-h1")});
  REQUIRE(r.schedule.name == "zb-h1");
  REQUIRE(r.counters.recomputes == std::vector<int>{3, 3});

  // A Schedule value runs as given: without R actions nothing is recomputed.
  const Schedule custom = make_schedule("gpipe", 2, 4);
  r = pipe.train_step(x, t, nn::mse_loss, {.schedule = custom});
  REQUIRE(r.schedule.actions == custom.actions);
  REQUIRE(r.counters.recomputes == std::vector<int>{0, 0});

  // One made for another micro-batch count is refused, naming both.
  REQUIRE_THROWS_MATCHES(
      pipe.train_step(x, t, nn::mse_loss, {.schedule = pipe.schedule_for(3)}),
      std::invalid_argument,
      Catch::Message("schedule '1f1b' has 3 micro-batches, the mini-batch splits into 4"));
  // Evaluation and Pipe::forward run forwards only: a schedule given them is refused.
  REQUIRE_THROWS_WITH(pipe.eval_step(x, t, nn::mse_loss, {.schedule = custom}),
                      Catch::Contains("eval_step: StepOptions::schedule is set"));
  REQUIRE_THROWS_WITH(
      pipe.forward({x}, {.schedule = custom}),
      "Pipe::forward: StepOptions fields it cannot honour are set: schedule (forward runs "
      "GPipe; use train_step)");
  REQUIRE_THROWS_WITH(
      pipe.forward({x}, {.target_chunks = {ChunkSpec::split(0)},
                         .reduction = LossReduction::kSum}),
      "Pipe::forward: StepOptions fields it cannot honour are set: target_chunks (forward "
      "takes no targets), reduction (the loss is the caller's)");
}

TEST_CASE("a plan's explicit recompute cells run in the Pipe, a short batch taking their "
          "prefix") {
  // Stage 0 recomputes micro-batches 0 and 2, stage 1 micro-batch 1.
  const RecomputeCells cells{{{1, 0, 1, 0}, {0, 1, 0, 0}}};
  Pipe pipe(small_mlp(1), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 4,
                           .schedule = {.name = "1f1b", .recompute = cells}});
  nn::Sequential plain = small_mlp(1);
  const Tensor x = randn({8, 4}, 2), t = randn({8, 3}, 3);
  StepResult r = pipe.train_step(x, t, nn::mse_loss);
  REQUIRE(r.counters.recomputes == std::vector<int>{2, 1});
  const Schedule expected = with_recompute(make_schedule("1f1b", 2, 4), [](int s, int j) {
    return (s == 0 && (j == 0 || j == 2)) || (s == 1 && j == 1);
  });
  REQUIRE(r.schedule.actions == expected.actions);
  nn::mse_loss(plain.forward(x), t).backward();
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);  // recomputing is exact

  pipe.zero_grad();
  r = pipe.train_step(randn({2, 4}, 4), randn({2, 3}, 5), nn::mse_loss);  // 2 micro-batches
  REQUIRE(r.counters.recomputes == std::vector<int>{1, 1});
  REQUIRE(pipe.schedule_for(2).actions == r.schedule.actions);

  REQUIRE_THROWS_WITH(
      Pipe(small_mlp(1), {.balance = {2, 3}, .devices = cpus(0, 2),
                          .schedule = {.recompute = RecomputeCells{{{1}}}}}),
      "PipeOptions::schedule.recompute names cells of 1 stages, the pipe has 2 (balance has "
      "one entry per stage)");
}
