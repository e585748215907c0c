// Results that do not depend on the cut (Note [Keyed randomness], nn/random_key.h): a model
// with Dropout and attention dropout, cut into 1, 2 and 4 workers, run by GPipe, 1F1B and
// ZB-V with 1 and 8 micro-batches, gives the plain model's gradients (the plain model under
// RandomKeyGuard, one forward of the whole batch) and, after an SGD step, the plain model's
// next loss, to float rounding. Checkpointing changes nothing: a recompute replays its masks.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "nn/random_key.h"
#include "nn/transformer.h"
#include "pipeline/pipe.h"
#include "tensor/generator.h"
#include "tests/compare.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;
using pipewright::testing::bitwise_equal;

namespace {

constexpr int64_t kDim = 8, kHeads = 2, kBatch = 8, kSeq = 4;
constexpr uint64_t kSeed = 11;

/// Eight children, so that 4 workers x 2 virtual stages (ZB-V) each get one.
nn::Sequential model() {
  Generator generator(3);
  GeneratorGuard guard(generator);
  nn::Sequential m;
  m.push_back(nn::Linear(kDim, kDim));
  m.push_back(nn::Dropout(0.3));
  for (int i = 0; i < 4; ++i) {
    m.push_back(nn::TransformerBlock(kDim, kHeads, {.dropout = 0.2}));
  }
  m.push_back(nn::Dropout(0.1));
  m.push_back(nn::Linear(kDim, kDim));
  return m;
}

Tensor mse(const Tensor& out, const Tensor& target) { return nn::mse_loss(out, target); }

/// The plain model's loss at random step `step` (gradients accumulate into its .grad).
double plain_step(nn::Sequential& plain, const Tensor& x, const Tensor& target, uint64_t step) {
  nn::RandomKeyGuard key({.seed = kSeed, .step = step, .first_sample = 0});
  Tensor loss = mse(plain.forward(x), target);
  loss.backward();
  return loss.item();
}

std::vector<int> even_balance(int parts) {
  std::vector<int> balance(static_cast<size_t>(parts), 8 / parts);
  return balance;
}

}  // namespace

TEST_CASE("every cut, schedule and micro-batching trains the plain model's steps",
          "[pipe][random]") {
  const int workers = GENERATE(1, 2, 4);
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "zb-v");
  const int chunks = GENERATE(1, 8);
  CAPTURE(workers, schedule, chunks);
  const int v = schedule == "zb-v" ? 2 : 1;
  const Tensor x = randn({kBatch, kSeq, kDim}, 5), target = randn({kBatch, kSeq, kDim}, 6);

  nn::Sequential plain = model();
  Pipe pipe(model(), {.balance = even_balance(workers * v),
                      .devices = cpus(0, workers),
                      .chunks = chunks,
                      .schedule = {.name = schedule, .virtual_stages = v,
                                   .recompute = Checkpoint::kNever},
                      .seed = kSeed});
  nn::SGD plain_opt(plain.parameters(), {.lr = 0.5});
  nn::SGD pipe_opt(pipe.parameters(), {.lr = 0.5});

  const double want = plain_step(plain, x, target, 0);
  const StepResult r = pipe.train_step(x, target, mse);
  CHECK(std::abs(r.loss - want) <= 1e-6 * std::max(1.0, want));
  REQUIRE(max_grad_diff(pipe.module(), plain) <= 1e-5);

  plain_opt.step();
  pipe_opt.step();
  plain_opt.zero_grad();
  pipe_opt.zero_grad();
  const double next = plain_step(plain, x, target, 1);
  const StepResult r2 = pipe.train_step(x, target, mse);
  CHECK(std::abs(r2.loss - next) <= 1e-5 * std::max(1.0, next));
  CHECK(max_grad_diff(pipe.module(), plain) <= 1e-4);
  // The step's masks matter: the second step's key draws other masks than the first's.
  CHECK(std::abs(next - want) > 1e-4);
}

TEST_CASE("checkpointed cells replay their keyed masks exactly", "[pipe][random]") {
  const std::string schedule = GENERATE(as<std::string>{}, "1f1b", "zb-v");
  CAPTURE(schedule);
  const int v = schedule == "zb-v" ? 2 : 1;
  auto make = [&](Checkpoint mode) {
    return Pipe(model(), {.balance = even_balance(2 * v), .devices = cpus(0, 2), .chunks = 4,
                          .schedule = {.name = schedule, .virtual_stages = v, .recompute = mode},
                          .seed = kSeed});
  };
  Pipe always = make(Checkpoint::kAlways), never = make(Checkpoint::kNever);
  const Tensor x = randn({kBatch, kSeq, kDim}, 7), target = randn({kBatch, kSeq, kDim}, 8);
  const StepResult a = always.train_step(x, target, mse);
  const StepResult n = never.train_step(x, target, mse);
  REQUIRE(a.counters.recomputes[0] > 0);
  CHECK(a.loss == n.loss);
  CHECK(bitwise_equal(grads_of(always.module()), grads_of(never.module())));
}

TEST_CASE("random_key counts training steps; manual_seed restarts it", "[pipe][random]") {
  Pipe pipe(model(), {.balance = {4, 4}, .devices = cpus(0, 2), .chunks = 2, .seed = 9});
  const Tensor x = randn({kBatch, kSeq, kDim}, 1), target = randn({kBatch, kSeq, kDim}, 2);
  CHECK(pipe.random_key().seed == 9);
  CHECK(pipe.random_key().step == 0);
  pipe.train_step(x, target, mse);
  pipe.eval_step(x, target, mse);  // uses step 1's key, counts nothing
  CHECK(pipe.random_key().step == 1);
  {
    autograd::NoGradGuard no_grad;
    pipe.forward(x);  // records nothing: counts nothing
  }
  CHECK(pipe.random_key().step == 1);
  pipe.forward(x);
  CHECK(pipe.random_key().step == 2);
  pipe.set_random_step(40);
  CHECK(pipe.random_key().step == 40);
  pipe.manual_seed(4);
  CHECK(pipe.random_key().seed == 4);
  CHECK(pipe.random_key().step == 0);
}
