// The planner's memory predictions on GPUs against the caching allocator's counters, to the
// byte: the CPU test's cases (tests/pipeline/planner/planner_memory_test.cc) with the model on
// cuda devices and the data on the host, as the examples run. What a GPU adds to a step's
// bytes: the micro-batch staged to the device inside stage 0's F, and the deferred index
// checks (Note [Deferred checks], tensor/deferred_check.h), whose one-element flags the
// cross-entropy's forward and backward leave on the device until the step's one read.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "pipeline/planner/planner.h"
#include "tensor/allocator.h"
#include "tests/compare.h"
#include "tests/cuda/gpu_test.h"
#include "tests/pipeline/planner/planner_test_model.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::planner_testing;
using pipewright::testing::equal_values;

namespace {

// cuda:0 for one worker; cuda:0, cuda:1 for two (the planner takes one device per worker, so
// the two-worker cases need two GPUs). Empty when the GPUs are missing (skipped).
std::vector<Device> gpus(int workers) {
  if (!testing::gpus_available_or_skip(workers)) return {};
  std::vector<Device> devices;
  for (int w = 0; w < workers; ++w) devices.push_back(Device::cuda(w));
  return devices;
}

}  // namespace

// CI also runs this test with one simulated GPU (.ci/run), as the card it first ran on had:
// nothing in a plan for cuda:0 may touch another GPU (the profile's copy timing asked for
// cuda:1), and the two-worker cases skip.
TEST_CASE("GPU, one micro-batch: each device's peak is predicted to the byte") {
  const int workers = GENERATE(1, 2);
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "zb-h1");
  CAPTURE(workers, schedule);
  const std::vector<Device> devices = gpus(workers);
  if (!devices.empty()) check_exact_peaks(devices, schedule);
}

TEST_CASE("GPU, several micro-batches: the measured peak lies within the predicted bounds") {
  const int workers = GENERATE(1, 2);
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "zb-h2");
  CAPTURE(workers, schedule);
  const std::vector<Device> devices = gpus(workers);
  if (!devices.empty()) check_peaks_within_bounds(devices, schedule, 4);
}

TEST_CASE("GPU: the trials run plans on the GPU and leave the model there as it was") {
  // Note [Trying the best plans] (pipeline/planner/trial.h): one worker on cuda:0, two
  // schedules and two chunks, so the pick has runners-up; the model's parameters and buffers
  // are back on cuda:0 with their values, and no .grad is left behind.
  const std::vector<Device> devices = gpus(1);
  if (devices.empty()) return;
  const Batch b = batch(Device::cpu(99));
  nn::Sequential model = mlp(1, devices.front());
  // Every value as float64 (to_vector converts), exact for float32 and the int64 counts.
  const auto values = [](const Tensor& t) { return t.to_vector<double>(); };
  std::vector<std::vector<double>> before;
  for (const auto& [name, t] : model.state_dict()) before.push_back(values(t));
  const Plan p = plan(model, {b.x, b.y, cross_entropy}, devices,
                      {.schedules = {"gpipe", "1f1b"},
                       .chunks = {1, 2},
                       .deferred_batch_norm = true,
                       .trial_margin = 100,
                       .trial_seconds = 0.1});
  CAPTURE(p.explain());
  REQUIRE(p.trials.size() >= 2);
  for (const PlanTrial& t : p.trials) {
    CAPTURE(t.config);
    CHECK(t.error.empty());
    CHECK(t.measured_us > 0);
  }
  size_t i = 0;
  for (const auto& [name, t] : model.state_dict()) {
    CAPTURE(name);
    CHECK(t.device() == devices.front());
    CHECK(equal_values(values(t), before[i++]));
  }
  for (const Tensor& t : model.parameters()) CHECK_FALSE(t.grad().defined());
}
