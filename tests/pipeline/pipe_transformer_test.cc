// A Sequential of TransformerBlocks through the pipeline: train_step under GPipe, 1F1B and
// ZB-V (whose W halves of LayerNorm, attention's and the MLP's weights are deferred) equals
// the plain model's loss and gradients; Pipe::clip_grad_norm then equals nn::clip_grad_norm
// on the plain model (the norm, and every clipped gradient) to float32 rounding. Across
// processes: tests/distributed/clip_grad_main.cc.
#include <catch2/catch.hpp>

#include <cmath>

#include "nn/clip_grad.h"
#include "nn/loss.h"
#include "nn/transformer.h"
#include "pipeline/pipe.h"
#include "tensor/generator.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

namespace {

constexpr int64_t kDim = 16, kHeads = 2, kBatch = 6, kSeq = 5;

/// Four blocks, identical for the same seed.
nn::Sequential blocks(uint64_t seed) {
  Generator generator(seed);
  GeneratorGuard guard(generator);
  nn::Sequential model;
  for (int i = 0; i < 4; ++i) model.push_back(nn::TransformerBlock(kDim, kHeads));
  return model;
}

struct Config {
  std::string schedule;
  std::vector<int> balance;
  int virtual_stages;
};

}  // namespace

TEST_CASE("TransformerBlocks through the pipe equal the plain model; so does clip_grad_norm",
          "[pipe][transformer]") {
  const Config config = GENERATE(Config{"gpipe", {2, 2}, 1}, Config{"1f1b", {1, 3}, 1},
                                 Config{"zb-v", {1, 1, 1, 1}, 2});
  const Checkpoint mode = GENERATE(Checkpoint::kNever, Checkpoint::kAlways);
  CAPTURE(config.schedule, config.balance, to_string(mode));
  nn::Sequential plain = blocks(7);
  Pipe pipe(blocks(7), {.balance = config.balance,
                        .devices = cpus(0, 2),
                        .chunks = 3,
                        .schedule = {.name = config.schedule,
                                     .virtual_stages = config.virtual_stages, .recompute = mode}});
  const Tensor x = randn({kBatch, kSeq, kDim}, 8);
  const Tensor target = randn({kBatch, kSeq, kDim}, 9);

  PlainRun ref = plain_model_run(plain, x, target);
  const StepResult r = pipe.train_step(x, target, [](const Tensor& out, const Tensor& t) {
    return nn::mse_loss(out, t);
  });
  CHECK(std::abs(r.loss - ref.loss.item()) <= 1e-5);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= 2e-5);

  const double max_norm = 0.05;  // far below the norm: every gradient is scaled
  const double want = nn::clip_grad_norm(plain.parameters(), max_norm);
  const double got = pipe.clip_grad_norm(max_norm);
  REQUIRE(want > 10 * max_norm);
  CHECK(std::abs(got - want) <= 1e-5 * want);
  CHECK(max_grad_diff(pipe.module(), plain) <= 2e-6);
  CHECK(std::abs(nn::total_grad_norm(pipe.parameters()) - max_norm) <= 1e-5);
}
