// The planner's trials (Note [Trying the best plans], pipeline/planner/trial.h): the best few
// plans run on the model, the fastest measured returned, and the model left as it was.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "nn/batch_norm.h"
#include "pipeline/planner/planner.h"
#include "pipeline/planner/trial.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"
#include "tests/compare.h"
#include "tests/pipeline/pipe_test_util.h"
#include "tests/pipeline/planner/planner_test_model.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::planner_testing;
using pipewright::pipeline::testing::buffers_of;
using pipewright::pipeline::testing::grads_of;
using pipewright::testing::bitwise_equal;

namespace {

// Two schedules and three chunks: several (schedule, chunks) near one another for a model
// this small, so the trials have runners-up; a wide margin keeps every one of them.
PlanOptions trial_options() {
  return {.schedules = {"gpipe", "1f1b"},
          .chunks = {1, 2, 4},
          .deferred_batch_norm = true,
          .trials = 3,
          .trial_margin = 100,
          .trial_seconds = 0.2};
}

}  // namespace

TEST_CASE("trials: the best plans run and the fastest measured is the plan") {
  const std::vector<Device> devices{Device::cpu(60), Device::cpu(61)};
  const Batch b = batch(Device::cpu(99));
  nn::Sequential model = mlp(1, devices.front());
  const Plan p = plan(model, {b.x, b.y, cross_entropy}, devices, trial_options());
  CAPTURE(p.explain());
  REQUIRE(p.trials.size() == 3);
  // The predicted best first, then the runners-up in predicted order, each a different
  // (schedule, chunks), each run for at least one timed step in each of the three rounds.
  for (size_t k = 1; k < p.trials.size(); ++k) {
    CHECK(p.trials[k - 1].predicted_us <= p.trials[k].predicted_us);
  }
  double fastest = p.trials.front().measured_us;
  for (const PlanTrial& t : p.trials) {
    CAPTURE(t.config);
    CHECK(t.error.empty());
    CHECK(t.steps >= 3);
    CHECK(t.measured_us > 0);
    CHECK(std::count_if(p.trials.begin(), p.trials.end(),
                        [&](const PlanTrial& u) { return u.config == t.config; }) == 1);
    fastest = std::min(fastest, t.measured_us);
  }
  CHECK(p.trial_step_us == fastest);
  const auto mine = std::find_if(p.trials.begin(), p.trials.end(),
                                 [&](const PlanTrial& t) { return t.config == p.str(); });
  REQUIRE(mine != p.trials.end());
  CHECK(mine->measured_us == fastest);
  CHECK(mine->predicted_us == p.step_time_us);
  CHECK(p.explain().find("* " + p.str() + ": ") != std::string::npos);
}

TEST_CASE("trials: the model is left as it was, on its device") {
  const std::vector<Device> devices{Device::cpu(62), Device::cpu(63)};
  const Batch b = batch(Device::cpu(99));
  nn::Sequential model = mlp(2, devices.front());
  // State a training loop may hold when it plans: .grad on some parameters, running
  // statistics moved, a child in eval mode, the caller's generator part-way.
  Generator caller(11);
  GeneratorGuard use(caller);
  model.train(true);
  (void)model.forward(b.x.to(devices.front()));  // running statistics move
  std::vector<Tensor> params = model.parameters();
  params[0].set_grad(Tensor::full(params[0].shape(), 0.5, {.device = devices.front()}));
  model.ptr(1)->train(false);
  std::vector<Tensor> values;
  for (const Tensor& t : params) values.push_back(t.clone());
  const nn::NamedTensors grads = grads_of(model), buffers = buffers_of(model);
  const TensorImpl* grad_handle = params[0].grad().impl();
  const uint64_t offset = caller.offset();
  const int64_t worker_bytes = allocator_for(devices[1]).allocated();

  const Plan p = plan(model, {b.x, b.y, cross_entropy}, devices, trial_options());
  REQUIRE(p.trials.size() >= 2);  // the Pipes ran

  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    CHECK(params[i].device() == devices.front());
  }
  CHECK(bitwise_equal(params, values));
  CHECK(bitwise_equal(grads_of(model), grads));
  CHECK(params[0].grad().impl() == grad_handle);
  CHECK_FALSE(params[1].grad().defined());
  CHECK(bitwise_equal(buffers_of(model), buffers));
  for (const auto& [name, t] : model.named_buffers()) CHECK(t.device() == devices.front());
  CHECK(model.is_training());
  CHECK_FALSE(model.ptr(1)->is_training());
  CHECK(model.ptr(0)->is_training());
  CHECK(caller.offset() == offset);
  CHECK(allocator_for(devices[1]).allocated() == worker_bytes);  // nothing left on worker 1
}

TEST_CASE("trials: none run when asked for at most one, or when one configuration is left") {
  const std::vector<Device> devices{Device::cpu(64), Device::cpu(65)};
  const Batch b = batch(Device::cpu(99));
  nn::Sequential model = mlp(1, devices.front());
  PlanOptions options = trial_options();
  options.trials = GENERATE(0, 1);
  const Plan off = plan(model, {b.x, b.y, cross_entropy}, devices, options);
  CHECK(off.trials.empty());
  CHECK(off.trial_step_us == 0);
  CHECK(off.explain().find("trials") == std::string::npos);
  options.trials = 3;
  options.schedules = {"1f1b"};
  options.chunks = {2};
  CHECK(plan(model, {b.x, b.y, cross_entropy}, devices, options).trials.empty());
}

TEST_CASE("trials: a run that throws is dropped with what it threw, the others measured") {
  const std::vector<Device> devices{Device::cpu(66), Device::cpu(67)};
  const Batch b = batch(Device::cpu(99));
  nn::Sequential model = mlp(1, devices.front());
  const Plan p = plan(model, {b.x, b.y, cross_entropy}, devices,
                      {.schedules = {"1f1b"}, .chunks = {2}, .deferred_batch_norm = true});
  const PipeOptions good = p.pipe_options(devices);
  PipeOptions bad = good;
  bad.balance = {1, 1};  // covers 2 of the model's 9 layers
  const std::vector<PlanTrial> trials =
      run_trials(model, b.x, b.y, cross_entropy, {bad, good}, {.rounds = 2, .seconds = 0.05});
  REQUIRE(trials.size() == 2);
  CHECK(trials[0].error.find("balance") != std::string::npos);
  CHECK(trials[0].measured_us == 0);
  CHECK(trials[0].steps == 0);
  CHECK(trials[1].error.empty());
  CHECK(trials[1].measured_us > 0);
  CHECK(trials[1].steps >= 2);
  for (const Tensor& t : model.parameters()) CHECK(t.device() == devices.front());
}

TEST_CASE("trials: options out of range are refused, naming the value") {
  const std::vector<Device> devices{Device::cpu(68)};
  const Batch b = batch(Device::cpu(99));
  nn::Sequential model = mlp(1, devices.front());
  PlanOptions options;
  options.trials = -1;
  CHECK_THROWS_WITH(plan(model, {b.x, b.y, cross_entropy}, devices, options),
                    Catch::Contains("trials must be >= 0 (got -1)"));
  options = {.trial_margin = 0.5};
  CHECK_THROWS_WITH(plan(model, {b.x, b.y, cross_entropy}, devices, options),
                    Catch::Contains("trial_margin must be finite and >= 1 (got 0.5"));
  options = {.trial_seconds = -1};
  CHECK_THROWS_WITH(plan(model, {b.x, b.y, cross_entropy}, devices, options),
                    Catch::Contains("trial_seconds must be finite and >= 0 (got -1"));
  CHECK_THROWS_WITH(run_trials(model, b.x, b.y, cross_entropy, {}, {.rounds = 0}),
                    Catch::Contains("rounds must be >= 1 (got 0)"));
}

TEST_CASE("trials: a plan's cache keeps them, and the next plan reads them instead of running") {
  const std::vector<Device> devices{Device::cpu(69), Device::cpu(70)};
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/trial_cache_test.json";
  std::remove(path.c_str());
  const Batch b = batch(Device::cpu(99));
  nn::Sequential model = mlp(1, devices.front());
  PlanOptions options = trial_options();
  options.cache = path;
  options.runtime_overhead = RuntimeOverhead{};  // the same profile gives the same candidates
  const Plan first = plan(model, {b.x, b.y, cross_entropy}, devices, options);
  REQUIRE(first.trials.size() == 3);
  CHECK_FALSE(first.trials_from_cache);
  const Plan second = plan(model, {b.x, b.y, cross_entropy}, devices, options);
  CHECK(second.profile_from_cache);
  CHECK(second.trials_from_cache);
  CHECK(second.str() == first.str());
  REQUIRE(second.trials.size() == first.trials.size());
  for (size_t k = 0; k < first.trials.size(); ++k) {
    CHECK(second.trials[k].config == first.trials[k].config);
    CHECK(second.trials[k].measured_us == first.trials[k].measured_us);
    CHECK(second.trials[k].steps == first.trials[k].steps);
  }
  CHECK(second.explain().find("read from the cache") != std::string::npos);
  // A plan whose candidates did not all run before runs them all again.
  options.trials = 4;
  CHECK_FALSE(plan(model, {b.x, b.y, cross_entropy}, devices, options).trials_from_cache);
  std::remove(path.c_str());
}
