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
#include "tests/cuda/gpu_test.h"
#include "tests/pipeline/planner/planner_test_model.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::planner_testing;

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
