// BatchNorm in a pipe: running statistics are updated once per micro-batch (never again by a
// recompute) or, with deferred_batch_norm, once per mini-batch with the whole batch's
// statistics — equal to BatchNorm on the whole batch, also when the batch yields fewer
// micro-batches than `chunks`. Without deferral, outputs, gradients and every running
// statistic equal the plain model run one micro-batch at a time.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/shape_ops.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/deferred_batch_norm.h"
#include "pipeline/pipe.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

namespace {

Tensor mse(const Tensor& out, const Tensor& t) { return nn::mse_loss(out, t.to(out.device())); }

// Linear BatchNorm1d ReLU Linear BatchNorm1d Linear, from `seed`.
nn::Sequential bn_model(uint64_t seed) {
  Generator g(seed);
  GeneratorGuard guard(g);
  return nn::Sequential(nn::Linear(4, 8), nn::BatchNorm1d(8), nn::ReLU(), nn::Linear(8, 6),
                        nn::BatchNorm1d(6), nn::Linear(6, 3));
}

nn::BatchNorm1d& bn(nn::Sequential& m, size_t i) { return dynamic_cast<nn::BatchNorm1d&>(m[i]); }

int64_t tracked(nn::BatchNorm1d& b) { return b.num_batches_tracked().to_vector<int64_t>()[0]; }

}  // namespace

TEST_CASE("find_batch_norms searches nested modules") {
  nn::Sequential inner(nn::Linear(2, 2), nn::BatchNorm1d(2));
  nn::Sequential outer;
  outer.push_back(nn::BatchNorm1d(2));
  outer.push_back(std::move(inner));
  REQUIRE(find_batch_norms(outer).size() == 2);
}

TEST_CASE("without deferral: one update per micro-batch, none from recomputes") {
  const Checkpoint mode = GENERATE(Checkpoint::kAlways, Checkpoint::kNever);
  CAPTURE(to_string(mode));
  Pipe pipe(bn_model(1), {.balance = {3, 3}, .devices = cpus(0, 2), .chunks = 4,
                          .schedule = {.recompute = mode}});
  mse(pipe.forward(randn({16, 4}, 2)), randn({16, 3}, 3)).backward();
  REQUIRE(pipe.last_counters().recomputes[0] == (mode == Checkpoint::kAlways ? 4 : 0));
  REQUIRE(tracked(bn(pipe.module(), 1)) == 4);
  REQUIRE(tracked(bn(pipe.module(), 4)) == 4);
}

TEST_CASE("deferred: running stats equal BatchNorm on the whole mini-batch") {
  const Checkpoint mode = GENERATE(Checkpoint::kAlways, Checkpoint::kExceptLast);
  const int64_t batch = GENERATE(16, 6);  // 6 rows in 4 chunks: 3 micro-batches of 2
  const std::string how = GENERATE(as<std::string>{}, "forward", "train_step-1f1b");
  CAPTURE(to_string(mode), batch, how);

  nn::Sequential plain = bn_model(5);
  Pipe pipe(bn_model(5), {.balance = {3, 3}, .devices = cpus(0, 2), .chunks = 4,
                          .schedule = {.recompute = mode}, .deferred_batch_norm = true});
  REQUIRE(bn(pipe.module(), 1).is_deferred());

  for (int step = 0; step < 2; ++step) {
    const Tensor x = randn({batch, 4}, 10 + step), t = randn({batch, 3}, 20 + step);
    plain.forward(x);  // whole-batch BatchNorm, training mode
    if (how == "forward") {
      mse(pipe.forward(x), t).backward();
    } else {
      pipe.train_step(x, t, mse, {.schedule = named_schedule(pipe, x, "1f1b")});
    }
    for (size_t i : {size_t{1}, size_t{4}}) {
      REQUIRE(tracked(bn(pipe.module(), i)) == step + 1);  // one commit per mini-batch
      REQUIRE(bn(pipe.module(), i).deferred_count() == 0);
    }
    // The first BatchNorm sees the same inputs as the plain model's, so its statistics must
    // match. (The second one's inputs differ by design: the first normalised each micro-batch
    // with its own statistics, as training-mode BatchNorm in a pipeline must.)
    REQUIRE(max_diff(bn(pipe.module(), 1).running_mean(), bn(plain, 1).running_mean()) < 1e-6);
    REQUIRE(max_diff(bn(pipe.module(), 1).running_var(), bn(plain, 1).running_var()) < 1e-5);
  }
}

TEST_CASE("deferred mode ends with the Pipe") {
  auto shared = std::make_shared<nn::BatchNorm1d>(4);
  {
    nn::Sequential m(nn::Linear(4, 4), shared);
    Pipe pipe(std::move(m), {.balance = {1, 1}, .devices = cpus(0, 2), .chunks = 2,
                             .deferred_batch_norm = true});
    REQUIRE(shared->is_deferred());
  }
  REQUIRE_FALSE(shared->is_deferred());
}

TEST_CASE("without deferral: outputs, gradients and every statistic equal the plain model run "
          "one micro-batch at a time") {
  // Without deferral, training-mode BatchNorm in a pipe normalises each micro-batch with its
  // own statistics and updates the running ones once per micro-batch, in micro-batch order:
  // exactly the plain model run on the 4 micro-batches one after another, its outputs
  // concatenated, one MSE over the whole batch.
  const Checkpoint mode = GENERATE(Checkpoint::kAlways, Checkpoint::kExceptLast,
                                   Checkpoint::kNever);
  const std::string how = GENERATE(as<std::string>{}, "forward", "train_step-1f1b");
  CAPTURE(to_string(mode), how);
  nn::Sequential plain = bn_model(8);
  Pipe pipe(bn_model(8), {.balance = {3, 3}, .devices = cpus(0, 2), .chunks = 4,
                          .schedule = {.recompute = mode}});
  const Tensor x = randn({16, 4}, 30), t = randn({16, 3}, 31);

  Tensor xr = x.clone().set_requires_grad(true);
  std::vector<Tensor> outs;
  for (const Tensor& xj : autograd::chunk(xr, 4)) outs.push_back(plain.forward(xj));
  const Tensor ref_out = autograd::cat(outs);
  Tensor ref_loss = nn::mse_loss(ref_out, t);
  ref_loss.backward();

  if (how == "forward") {
    Tensor xp = x.clone().set_requires_grad(true);
    const Tensor out = pipe.forward(xp);
    REQUIRE(max_diff(out, ref_out) <= 1e-6);
    Tensor loss = mse(out, t);
    REQUIRE(std::abs(loss.item() - ref_loss.item()) <= 1e-6);
    loss.backward();
    REQUIRE(max_diff(xp.grad(), xr.grad()) <= 1e-6);
  } else {
    const StepResult r = pipe.train_step(x, t, mse, {.schedule = named_schedule(pipe, x, "1f1b")});
    REQUIRE(std::abs(r.loss - ref_loss.item()) <= 1e-6);
  }
  REQUIRE(max_grad_diff(pipe.module(), plain) <= 1e-5);
  for (size_t i : {size_t{1}, size_t{4}}) {
    CAPTURE(i);
    REQUIRE(tracked(bn(pipe.module(), i)) == 4);
    REQUIRE(tracked(bn(plain, i)) == 4);
    REQUIRE(max_diff(bn(pipe.module(), i).running_mean(), bn(plain, i).running_mean()) <= 1e-6);
    REQUIRE(max_diff(bn(pipe.module(), i).running_var(), bn(plain, i).running_var()) <= 1e-6);
  }
}
