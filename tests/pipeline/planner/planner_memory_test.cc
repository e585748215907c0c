// The planner's memory predictions against the allocators of a real Pipe, to the byte.
//
// The model is the main job's kind (Linear, deferred BatchNorm1d, ReLU, Dropout per hidden
// layer, then a Linear and cross-entropy), trained as the examples train: zero_grad (to
// none), train_step with the plan's schedule, Adam's step. Each worker's device is compared
// with the plan's DevicePeak after the first step (Adam's state exists from then on):
//   - before a step the device holds exactly the static part (parameters + Adam's two moments);
//   - with one micro-batch every message is ordered by the schedule, so low == high and the
//     measured peak equals the prediction exactly, on one device and on two;
//   - otherwise the measured peak lies in [low, high] (Note [Replaying a device's memory]).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "pipeline/pipe.h"
#include "pipeline/planner/planner.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"

using namespace pipewright;
using namespace pipewright::pipeline;

namespace {

constexpr int64_t kRows = 48, kIn = 24, kHidden = 40, kClasses = 10;

nn::Sequential mlp(uint64_t seed, Device device) {
  Generator g(seed);
  GeneratorGuard guard(g);
  const TensorOptions on{.device = device};
  nn::Sequential m;
  int64_t width = kIn;
  for (int k = 0; k < 2; ++k) {
    m.push_back(nn::Linear(width, kHidden, true, on));
    m.push_back(nn::BatchNorm1d(kHidden, 1e-5, 0.1, true, true, on));
    m.push_back(nn::ReLU());
    m.push_back(nn::Dropout(0.2));
    width = kHidden;
  }
  m.push_back(nn::Linear(width, kClasses, true, on));
  return m;
}

struct Batch {
  Tensor x, y;
};

// The data live on a device of their own, as the examples' loader's do.
Batch batch(Device data) {
  Generator g(3);
  Tensor x = Tensor::empty({kRows, kIn}, {.device = data});
  g.uniform_(x, -1, 1);
  std::vector<int64_t> labels(kRows);
  for (int64_t i = 0; i < kRows; ++i) labels[static_cast<size_t>(i)] = (i * 7) % kClasses;
  return {x, Tensor::from_vector(labels, Shape{kRows}, data)};
}

Tensor cross_entropy(const Tensor& out, const Tensor& target) {
  return nn::cross_entropy(out, target);
}

struct Measured {
  std::vector<int64_t> before, peak;
};

// Trains three steps as the examples do; measures each worker's device over steps 2 and 3.
Measured train(const Plan& plan, const std::vector<Device>& devices, const Batch& b) {
  Pipe pipe(mlp(1, devices.front()), plan.pipe_options(devices));
  nn::Adam adam(pipe.parameters(), {.lr = 1e-3});
  auto step = [&] {
    adam.zero_grad();
    pipe.train_step(b.x, b.y, cross_entropy, plan.schedule_for(plan.num_microbatches));
    adam.step();
  };
  step();
  Measured m;
  adam.zero_grad();
  for (const Device& d : devices) {
    m.before.push_back(allocator_for(d).allocated());
    allocator_for(d).reset_peak();
  }
  step();
  step();
  for (const Device& d : devices) m.peak.push_back(allocator_for(d).peak());
  return m;
}

Plan plan_for(const std::vector<Device>& devices, const std::string& schedule, int chunks,
              int64_t cap = 0, int max_v = 1) {
  nn::Sequential model = mlp(1, devices.front());
  const Batch b = batch(Device::cpu(99));
  return plan(model, {b.x, b.y, cross_entropy}, devices,
              {.memory_cap_bytes = cap,
               .schedules = {schedule},
               .chunks = {chunks},
               .max_virtual_stages = max_v,
               .deferred_batch_norm = true});
}

int64_t static_bytes(const Plan& p, int w) {
  // Parameters and Adam's two moments of the worker's stages (3x their parameter bytes) and
  // BatchNorm's running statistics.
  nn::Sequential model = mlp(1, Device::cpu(0));
  int64_t bytes = 0;
  int layer = 0;
  for (size_t s = 0; s < p.balance.size(); ++s) {
    for (int k = 0; k < p.balance[s]; ++k, ++layer) {
      if (p.stage_worker[s] != w) continue;
      for (const Tensor& t : model[static_cast<size_t>(layer)].parameters()) {
        bytes += 3 * static_cast<int64_t>(t.nbytes());
      }
      for (const auto& [name, t] : model[static_cast<size_t>(layer)].named_buffers()) {
        bytes += static_cast<int64_t>(t.nbytes());
      }
    }
  }
  return bytes;
}

}  // namespace

TEST_CASE("one micro-batch: each device's peak is predicted to the byte") {
  const int workers = GENERATE(1, 2);
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "zb-h1");
  CAPTURE(workers, schedule);
  const std::vector<Device> devices =
      workers == 1 ? std::vector<Device>{Device::cpu(40)}
                   : std::vector<Device>{Device::cpu(40), Device::cpu(41)};
  const Plan p = plan_for(devices, schedule, 1);
  REQUIRE(p.exact_memory);
  REQUIRE(p.num_microbatches == 1);
  const Measured m = train(p, devices, batch(Device::cpu(99)));
  for (int w = 0; w < workers; ++w) {
    CAPTURE(w, p.explain());
    const auto& peak = p.peaks[static_cast<size_t>(w)];
    CHECK(m.before[static_cast<size_t>(w)] == static_bytes(p, w));
    CHECK(peak.low == peak.high);
    CHECK(m.peak[static_cast<size_t>(w)] == peak.predicted);
  }
}

TEST_CASE("several micro-batches: the measured peak lies within the predicted bounds") {
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "zb-h2");
  const int chunks = GENERATE(3, 4);
  CAPTURE(schedule, chunks);
  const std::vector<Device> devices{Device::cpu(42), Device::cpu(43)};
  const Plan p = plan_for(devices, schedule, chunks);
  const Measured m = train(p, devices, batch(Device::cpu(99)));
  for (int w = 0; w < 2; ++w) {
    CAPTURE(w, p.explain());
    const auto& peak = p.peaks[static_cast<size_t>(w)];
    CHECK(m.before[static_cast<size_t>(w)] == static_bytes(p, w));
    CHECK(peak.low <= peak.predicted);
    CHECK(peak.predicted <= peak.high);
    CHECK(peak.low <= m.peak[static_cast<size_t>(w)]);
    CHECK(m.peak[static_cast<size_t>(w)] <= peak.high);
  }
}

TEST_CASE("one worker with two virtual stages: copy-free hand-offs are predicted to the byte") {
  const std::vector<Device> devices{Device::cpu(44)};
  const Plan p = plan_for(devices, "interleaved-1f1b", 2, 0, 2);
  REQUIRE(p.virtual_stages == 2);
  const Measured m = train(p, devices, batch(Device::cpu(99)));
  CAPTURE(p.explain());
  CHECK(m.peak[0] == p.peaks[0].predicted);
}

TEST_CASE("nothing fits: the refusal names the smallest cap, and that cap fits") {
  const std::vector<Device> devices{Device::cpu(45), Device::cpu(46)};
  int64_t smallest = 0;
  try {
    plan_for(devices, "1f1b", 4, 1024);
    FAIL("a 1 KiB cap was accepted");
  } catch (const NoPlanFits& e) {
    smallest = e.smallest_cap_bytes();
    CHECK_THAT(e.what(), Catch::Contains("nothing fits a memory cap of 1.0 KiB per device") &&
                             Catch::Contains("raise the cap to at least") &&
                             Catch::Contains(std::to_string(smallest) + " bytes"));
  }
  REQUIRE(smallest > 1024);
  const Plan p = plan_for(devices, "1f1b", 4, smallest);
  for (const DevicePeak& peak : p.peaks) CHECK(peak.high <= smallest);
  CHECK_THROWS_AS(plan_for(devices, "1f1b", 4, smallest - 1), NoPlanFits);
}

// A cap between every cut's all-recompute peak and its no-recompute peak: the plan must
// recompute some cells and not others, and the Pipe then stays within the cap.
TEST_CASE("a cap only a partial recompute placement fits") {
  const std::vector<Device> devices{Device::cpu(47), Device::cpu(48)};
  const Plan free = plan_for(devices, "1f1b", 4);
  REQUIRE(free.recomputed == 0);
  int64_t smallest = 0;
  try {
    plan_for(devices, "1f1b", 4, 1024);
  } catch (const NoPlanFits& e) {
    smallest = e.smallest_cap_bytes();
  }
  int64_t highest = 0;
  for (const DevicePeak& peak : free.peaks) highest = std::max(highest, peak.high);
  REQUIRE(smallest < highest);
  const int64_t cap = smallest + (highest - smallest) / 2;
  const Plan p = plan_for(devices, "1f1b", 4, cap);
  CAPTURE(p.explain());
  CHECK(p.recomputed > 0);
  CHECK(p.recomputed < 4 * static_cast<int>(p.balance.size()));
  const Measured m = train(p, devices, batch(Device::cpu(99)));
  for (int w = 0; w < 2; ++w) {
    CHECK(m.peak[static_cast<size_t>(w)] <= p.peaks[static_cast<size_t>(w)].high);
    CHECK(p.peaks[static_cast<size_t>(w)].high <= cap);
  }
}
