// Pipe::step: the optimizer's step with each stage's parameters updated on that stage's
// worker equals optimizer.step() bit for bit, for SGD (momentum), Adam and AdamW with
// parameter groups, over several steps (state carried), with 1, 2 and 3 workers and with
// interleaved stages; a parameter of no stage is updated on the caller's thread; a grad that
// does not match its parameter is refused before any parameter changes.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "pipeline/pipe.h"
#include "tests/compare.h"
#include "tests/pipeline/pipe_test_util.h"

namespace {

using namespace pipewright;
using pipeline::Pipe;
using pipeline::testing::cpus;
using pipeline::testing::params_of;
using pipeline::testing::randn;
using pipewright::testing::bitwise_equal;

std::unique_ptr<nn::Optimizer> make(const std::string& which, const std::vector<Tensor>& params) {
  if (which == "sgd") return std::make_unique<nn::SGD>(params, nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
  if (which == "adam") return std::make_unique<nn::Adam>(params, nn::AdamOptions{.lr = 1e-2});
  return std::make_unique<nn::AdamW>(nn::weight_decay_groups(params, 0.1), nn::AdamWOptions{.lr = 1e-2});
}

}  // namespace

TEST_CASE("Pipe::step equals optimizer.step bit for bit, stage by stage on the workers") {
  const std::string which = GENERATE(std::string("sgd"), std::string("adam"), std::string("adamw"));
  struct Layout {
    std::vector<int> balance;
    int workers, virtual_stages;
    std::string schedule;
  };
  const Layout layout = GENERATE(Layout{{5}, 1, 1, "gpipe"}, Layout{{2, 3}, 2, 1, "1f1b"},
                                 Layout{{2, 2, 1}, 3, 1, "gpipe"},
                                 Layout{{1, 1, 2, 1}, 2, 2, "interleaved-1f1b"});
  CAPTURE(which, layout.workers, layout.virtual_stages);
  auto pipe_of = [&] {
    return Pipe(pipeline::testing::small_mlp(7),
                {.balance = layout.balance,
                 .devices = cpus(0, layout.workers),
                 .chunks = 4,
                 .schedule = {.name = layout.schedule, .virtual_stages = layout.virtual_stages}});
  };
  Pipe staged = pipe_of(), whole = pipe_of();
  const auto a = make(which, staged.parameters()), b = make(which, whole.parameters());
  const pipeline::LossFn mse = [](const Tensor& o, const Tensor& t) { return nn::mse_loss(o, t); };
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    const Tensor x = randn({8, 4}, 10 + step), y = randn({8, 3}, 20 + step);
    a->zero_grad();
    b->zero_grad();
    staged.train_step(x, y, mse);
    whole.train_step(x, y, mse);
    staged.step(*a);
    b->step();
    REQUIRE(bitwise_equal(params_of(staged.module()), params_of(whole.module())));
  }
  REQUIRE(a->state_dict().size() == b->state_dict().size());
}

TEST_CASE("Pipe::step: a parameter of no stage on the caller's thread; a bad grad refused before any change") {
  Pipe pipe(pipeline::testing::small_mlp(7), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 2});
  Tensor extra = randn({3}, 5).set_requires_grad(true);
  std::vector<Tensor> params = pipe.parameters();
  params.push_back(extra);
  nn::SGD sgd(params, {.lr = 0.5});
  const pipeline::LossFn mse = [](const Tensor& o, const Tensor& t) { return nn::mse_loss(o, t); };
  pipe.train_step(randn({4, 4}, 1), randn({4, 3}, 2), mse);
  extra.set_grad(Tensor::ones({3}));
  const std::vector<double> before = extra.to_vector<double>();
  pipe.step(sgd);
  const std::vector<double> after = extra.to_vector<double>();
  for (size_t i = 0; i < before.size(); ++i) CHECK(after[i] == Approx(before[i] - 0.5));

  const nn::NamedTensors weights = params_of(pipe.module());
  pipe.module().parameters().back().set_grad(Tensor::ones({7}));  // the last bias is [3]
  REQUIRE_THROWS_WITH(pipe.step(sgd), Catch::Contains("does not match the parameter"));
  CHECK(bitwise_equal(params_of(pipe.module()), weights));  // nor did stage 0's update
}
