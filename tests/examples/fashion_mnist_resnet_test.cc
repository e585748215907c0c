// End-to-end: the residual-network example (examples/fashion_mnist_resnet) on a slice of the
// real data, with a cut that sends both blocks' skips across stages.
#include <sstream>

#include <catch2/catch.hpp>

#include "autograd/grad_mode.h"
#include "examples/fashion_mnist_resnet/resnet.h"
#include "pipeline/pipe.h"
#include "pipeline/skip_layout.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

using namespace pipewright;
using pipewright::examples::ResNetOptions;
using pipewright::examples::TrainConfig;

namespace {

// Width 32, two blocks without dropout: stem (children 0-2), block 1 (3-10), block 2
// (11-18), head (19). Balance {5, 8, 7} cuts both blocks: block 1 stashes on stage 0 (child
// 3) and pops on stage 1 (child 9), block 2 stashes on stage 1 (child 11) and pops on stage 2
// (child 17).
constexpr ResNetOptions kSmall{.width = 32, .blocks = 2, .dropout = 0.0};
const std::vector<int> kCut = {5, 8, 7};

TrainConfig small_config() {
  TrainConfig c;
  c.epochs = 1;
  c.batch_size = 50;
  c.workers = 3;
  c.balance = kCut;
  c.chunks = 4;
  c.lr = 3e-3;
  c.train_limit = 2000;  // 40 steps: BatchNorm's running statistics (eval mode) settle
  c.test_limit = 300;
  c.progress = false;
  c.seed = 5;
  return c;
}

double mean(const std::vector<double>& v, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += v[i];
  return sum / static_cast<double>(end - begin);
}

}  // namespace

TEST_CASE("the resnet's skips are isolated per block and the cut sends both across stages") {
  nn::Sequential model = examples::build_resnet(kSmall, 0);
  REQUIRE(model.size() == 20);
  CHECK(examples::resnet_block_size(kSmall) == 8);
  const pipeline::SkipLayout layout(model, kCut);
  REQUIRE(layout.routes().size() == 2);
  CHECK(layout.route(0).key.name == "in");
  CHECK(layout.route(1).key.name == "in");
  CHECK(layout.route(0).key.ns != layout.route(1).key.ns);  // one namespace per block
  CHECK(layout.route(0).stash_stage == 0);
  CHECK(layout.route(0).pop_stage == 1);
  CHECK(layout.route(1).stash_stage == 1);
  CHECK(layout.route(1).pop_stage == 2);
  CHECK_THROWS_WITH(examples::build_resnet({.width = 0}, 0), Catch::Contains("--width 0"));
  CHECK_THROWS_WITH(examples::build_resnet({.dropout = 1.0}, 0), Catch::Contains("--dropout 1"));
}

TEST_CASE("the pipelined resnet computes what the plain one does") {
  nn::Sequential plain = examples::build_resnet(kSmall, 3);
  pipeline::Pipe pipe(
      examples::build_resnet(kSmall, 3),
      {.balance = kCut, .devices = {Device::cpu(0), Device::cpu(1), Device::cpu(2)}, .chunks = 3});
  Generator g(11);
  Tensor x = Tensor::empty({12, 784});
  g.normal_(x);
  autograd::NoGradGuard no_grad;
  plain.eval();
  pipe.eval();
  const Tensor expected = plain.forward(x);
  const Tensor got = pipe.forward(x).to(Device::cpu(0));
  CHECK(ops::allclose(got, expected, 1e-5, 1e-5));
}

TEST_CASE("one epoch on a slice of Fashion-MNIST lowers the loss and beats chance by far") {
  std::ostringstream log;
  const auto result = examples::train(small_config(), log, examples::resnet_task(kSmall));
  INFO(log.str());
  REQUIRE(result.epochs.size() == 1);
  const auto& e = result.epochs[0];
  REQUIRE(e.step_losses.size() == 40);
  CHECK(e.step_losses[0] > 2.0);  // about ln 10 = 2.30 at the start
  CHECK(mean(e.step_losses, 35, 40) < 0.6 * mean(e.step_losses, 0, 5));
  CHECK(e.test_accuracy > 0.6);  // chance is 0.1
  REQUIRE(e.peak_bytes.size() == 3);
  CHECK(log.str().find("balance 5 8 7") != std::string::npos);
  CHECK(log.str().find("to stage 1 (child 9, AddStashed(in)): portal") != std::string::npos);
  CHECK(log.str().find("to stage 2 (child 17, AddStashed(in)): portal") != std::string::npos);
}
