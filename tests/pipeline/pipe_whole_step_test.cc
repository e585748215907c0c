// Pipe::train_step(x, y, loss_fn, optimizer): the whole step in one call (zero_grad, the step,
// the optimizer on each stage's worker) equals the three calls bit for bit; its
// StepOptions::max_grad_norm clips on the device to what clip_grad_norm gives, up to rounding;
// the options are checked; PipeOptions::cuda_graphs on CPU devices leaves every step eager.
// (Graphs themselves: tests/cuda:pipe_graph_test.)
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "nn/loss.h"
#include "nn/optim_adam.h"
#include "pipeline/pipe.h"
#include "tests/compare.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;
using pipewright::testing::bitwise_equal;

namespace {

constexpr int kSteps = 4;

struct Run {
  std::vector<double> losses;
  nn::NamedTensors state;
};

/// kSteps of 1F1B on two CPU stages; `whole`: one call a step, else the three calls (with
/// clip_grad_norm between train_step and step when max_norm > 0).
Run train(bool whole, double max_norm, bool graphs = false) {
  Pipe pipe(small_mlp(7), {.balance = {3, 2}, .devices = cpus(0, 2), .chunks = 2,
                           .schedule = {.name = "1f1b"}, .cuda_graphs = graphs});
  nn::AdamW adam(pipe.parameters(), {.lr = 1e-2});
  Run run;
  for (int s = 0; s < kSteps; ++s) {
    const Tensor x = randn({8, 4}, 40 + s), y = randn({8, 3}, 50 + s);
    if (whole) {
      run.losses.push_back(
          pipe.train_step(x, y, nn::mse_loss, adam, {.max_grad_norm = max_norm}).loss);
    } else {
      adam.zero_grad();
      run.losses.push_back(pipe.train_step(x, y, nn::mse_loss).loss);
      if (max_norm > 0) CHECK(pipe.clip_grad_norm(max_norm) > max_norm);  // it clips
      pipe.step(adam);
    }
  }
  run.state = pipe.module().state_dict();
  return run;
}

}  // namespace

TEST_CASE("the whole step in one call equals zero_grad, train_step and step bit for bit") {
  const Run three = train(false, 0.0), one = train(true, 0.0);
  CHECK(one.losses == three.losses);
  REQUIRE(one.state.size() == three.state.size());
  for (size_t i = 0; i < one.state.size(); ++i) {
    INFO(one.state[i].first);
    CHECK(bitwise_equal(one.state[i].second, three.state[i].second));
  }
}

TEST_CASE("max_grad_norm clips on the device as clip_grad_norm does, up to rounding") {
  const double max_norm = 0.05;  // below every step's norm: each step clips
  const Run three = train(false, max_norm), one = train(true, max_norm);
  const Run unclipped = train(true, 0.0);
  for (size_t i = 0; i < one.state.size(); ++i) {
    INFO(one.state[i].first);
    CHECK(max_diff(one.state[i].second, three.state[i].second) < 1e-6);
  }
  CHECK(max_diff(one.state[0].second, unclipped.state[0].second) > 1e-4);  // it clipped
}

TEST_CASE("the whole step's options are checked") {
  Pipe pipe(small_mlp(7), {.balance = {3, 2}, .devices = cpus(0, 2), .chunks = 2});
  nn::AdamW adam(pipe.parameters(), {.lr = 1e-2});
  const Tensor x = randn({8, 4}, 1), y = randn({8, 3}, 2);
  CHECK_THROWS_WITH(pipe.train_step(x, y, nn::mse_loss, adam, {.max_grad_norm = -1.0}),
                    Catch::Contains("max_grad_norm must be >= 0 and finite, got -1"));
  CHECK_THROWS_WITH(pipe.train_step(x, y, nn::mse_loss, {.max_grad_norm = 1.0}),
                    Catch::Contains("clipping belongs to the whole step"));
}

TEST_CASE("cuda_graphs on CPU devices: every step eager, the same bits") {
  const Run graphs = train(true, 0.0, true);
  const Run plain = train(true, 0.0, false);
  CHECK(graphs.losses == plain.losses);
  for (size_t i = 0; i < graphs.state.size(); ++i) {
    CHECK(bitwise_equal(graphs.state[i].second, plain.state[i].second));
  }
}
