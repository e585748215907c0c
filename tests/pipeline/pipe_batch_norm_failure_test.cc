// Deferred BatchNorm and a step that fails midway: the statistics its micro-batches
// accumulated are discarded (DeferredBatchNorm::discard from the Pipe's failure path), so the
// next good step updates the running statistics exactly as if the failed step never ran.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>

#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

namespace {

// Linear(4,8) BatchNorm1d(8) | ThrowInForward Linear(8,3), from `seed`.
nn::Sequential model(uint64_t seed, std::shared_ptr<std::atomic<int>> countdown) {
  Generator g(seed);
  GeneratorGuard guard(g);
  nn::Sequential m(nn::Linear(4, 8), nn::BatchNorm1d(8));
  m.push_back(ThrowInForward(std::move(countdown), "stage 1 exploded"));
  m.push_back(nn::Linear(8, 3));
  return m;
}

nn::BatchNorm1d& bn(Pipe& pipe) { return dynamic_cast<nn::BatchNorm1d&>(pipe.module()[1]); }

Tensor mse(const Tensor& out, const Tensor& t) { return nn::mse_loss(out, t.to(out.device())); }

void run_step(Pipe& pipe, const std::string& how, const Tensor& x, const Tensor& t) {
  if (how == "forward") {
    mse(pipe.forward(x), t).backward();
  } else {
    pipe.train_step(x, t, mse, {.schedule = named_schedule(pipe, x, how)});
  }
}

}  // namespace

TEST_CASE("deferred BatchNorm: a failed step's statistics do not leak into the next step") {
  const std::string how = GENERATE(as<std::string>{}, "forward", "gpipe", "1f1b");
  CAPTURE(how);
  const PipeOptions options{.balance = {2, 2}, .devices = cpus(0, 2), .chunks = 4,
                            .deferred_batch_norm = true};
  auto countdown = std::make_shared<std::atomic<int>>(3);  // stage 1's third forward throws
  Pipe pipe(model(7, countdown), options);
  auto never = std::make_shared<std::atomic<int>>(0);
  Pipe fresh(model(7, never), options);  // the reference: only the good step

  const Tensor bad_x = randn({16, 4}, 1), bad_t = randn({16, 3}, 2);
  REQUIRE_THROWS_WITH(run_step(pipe, how, bad_x, bad_t), "stage 1 exploded");
  // Stage 0 had normalised at least three micro-batches before the failure reached it.
  CHECK(bn(pipe).deferred_count() == 0);
  CHECK(bn(pipe).num_batches_tracked().to_vector<int64_t>()[0] == 0);

  const Tensor x = randn({16, 4}, 3), t = randn({16, 3}, 4);
  run_step(pipe, how, x, t);
  run_step(fresh, how, x, t);
  CHECK(bn(pipe).num_batches_tracked().to_vector<int64_t>()[0] == 1);
  CHECK(max_diff(bn(pipe).running_mean(), bn(fresh).running_mean()) == 0.0);
  CHECK(max_diff(bn(pipe).running_var(), bn(fresh).running_var()) == 0.0);
  CHECK(max_diff(bn(pipe).running_mean(), Tensor::zeros({8})) > 0.0);  // the step did update
}

TEST_CASE("BatchNorm1d::discard_deferred drops the accumulated sums only") {
  nn::BatchNorm1d b(3);
  b.set_deferred(true);
  b.forward(randn({5, 3}, 9));
  REQUIRE(b.deferred_count() == 5);
  b.discard_deferred();
  CHECK(b.deferred_count() == 0);
  b.commit_deferred();  // nothing left to commit
  CHECK(b.num_batches_tracked().to_vector<int64_t>()[0] == 0);
  CHECK(max_diff(b.running_mean(), Tensor::zeros({3})) == 0.0);
  CHECK(max_diff(b.running_var(), Tensor::ones({3})) == 0.0);
}
