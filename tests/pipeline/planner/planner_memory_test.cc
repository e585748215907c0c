// The planner's memory predictions against the allocators of a real Pipe, to the byte.
//
// The model is the main job's kind, trained as the examples train (planner_test_model.h;
// tests/cuda:planner_memory_test runs the same on GPUs). Each worker's device is compared
// with the plan's DevicePeak after the first step (Adam's state exists from then on):
//   - before a step the device holds exactly the static part (parameters + Adam's two moments);
//   - with one micro-batch every message is ordered by the schedule, so low == high and the
//     measured peak equals the prediction exactly, on one device and on two;
//   - otherwise the measured peak lies in [low, high] (Note [Replaying a device's memory]).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "nn/skip.h"
#include "pipeline/pipe.h"
#include "pipeline/planner/memory_replay.h"
#include "pipeline/planner/planner.h"
#include "pipeline/planner/stage_estimate.h"
#include "pipeline/planner/stage_probe.h"
#include "pipeline/schedule/generators.h"
#include "pipeline/schedule/replay.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"
#include "tensor/matmul_precision.h"
#include "tests/pipeline/pipe_test_util.h"
#include "tests/pipeline/planner/planner_test_model.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::planner_testing;

namespace {

// Linear, ReLU, [Stash, Linear, ReLU, Linear, Pop (add)], ReLU, Linear: a residual block
// whose two wide Linears (kHidden -> kResidualWide -> kHidden) hold most of the work, so that every
// balanced cut into two stages falls inside the skip (stashed by layer 2, popped by 6).
constexpr int64_t kResidualWide = 4 * kHidden;

nn::Sequential residual(uint64_t seed, Device device) {
  Generator g(seed);
  GeneratorGuard guard(g);
  const TensorOptions on{.device = device};
  nn::Sequential m;
  m.push_back(nn::Linear(kIn, kHidden, true, on));
  m.push_back(nn::ReLU());
  m.push_back(testing::Stash("x"));
  m.push_back(nn::Linear(kHidden, kResidualWide, true, on));
  m.push_back(nn::ReLU());
  m.push_back(nn::Linear(kResidualWide, kHidden, true, on));
  m.push_back(testing::Pop("x"));
  m.push_back(nn::ReLU());
  m.push_back(nn::Linear(kHidden, kClasses, true, on));
  return m;
}

}  // namespace

TEST_CASE("one micro-batch: each device's peak is predicted to the byte") {
  const int workers = GENERATE(1, 2);
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "zb-h1");
  CAPTURE(workers, schedule);
  check_exact_peaks(workers == 1 ? std::vector<Device>{Device::cpu(40)}
                                 : std::vector<Device>{Device::cpu(40), Device::cpu(41)},
                    schedule);
}

TEST_CASE("under bf16 and fp16 (working copies, 16-bit messages) each device's peak is "
          "predicted to the byte, and within the bounds with several micro-batches") {
  const autograd::Precision precision =
      GENERATE(autograd::Precision::kBFloat16, autograd::Precision::kFloat16);
  const std::string schedule = GENERATE(as<std::string>{}, "1f1b", "zb-h1");
  CAPTURE(autograd::precision_name(precision), schedule);
  check_exact_peaks({Device::cpu(60), Device::cpu(61)}, schedule, precision);
  check_peaks_within_bounds({Device::cpu(62), Device::cpu(63)}, schedule, 4, precision);
}

TEST_CASE("several micro-batches: the measured peak lies within the predicted bounds") {
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "zb-h2");
  const int chunks = GENERATE(3, 4);
  CAPTURE(schedule, chunks);
  check_peaks_within_bounds({Device::cpu(42), Device::cpu(43)}, schedule, chunks);
}

TEST_CASE("one worker with two virtual stages: copy-free hand-offs are predicted to the byte") {
  // Under bf16 the message a stage hands on is its narrowed copy (Note [16-bit messages]).
  const autograd::Precision precision =
      GENERATE(autograd::Precision::kFloat32, autograd::Precision::kBFloat16);
  CAPTURE(autograd::precision_name(precision));
  const std::vector<Device> devices{
      Device::cpu(precision == autograd::Precision::kFloat32 ? 44 : 64)};
  const Batch b = batch(Device::cpu(99));
  const Plan p = [&] {
    nn::Sequential model = mlp(1, devices.front());  // gone before the Pipe's is measured
    return plan(model, {b.x, b.y, cross_entropy}, devices,
                {.schedules = {"interleaved-1f1b"},
                 .chunks = {2},
                 .virtual_stages = {2},
                 .deferred_batch_norm = true,
                 .precision = precision});
  }();
  REQUIRE(p.virtual_stages == 2);
  const Measured m = train(p, devices, batch(Device::cpu(99)));
  CAPTURE(p.explain());
  CHECK(m.peak[0] == p.peaks[0].predicted);
}

TEST_CASE("a cut inside a skip connection: its portal's bytes are predicted like a message's") {
  // The profile runs a layer several times and alone (Note [Skips in the profile]): the Pop
  // layer must find its skip each time. The stage probe measures the portal with the stages'
  // own messages (Note [Cuts inside a skip], cuts.h): with one micro-batch the peaks are
  // exact, with three within the bounds.
  const int chunks = GENERATE(1, 3);
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b");
  CAPTURE(chunks, schedule);
  const std::vector<Device> devices{Device::cpu(49), Device::cpu(50)};
  const Batch b = batch(Device::cpu(99));
  const Plan p = [&] {
    nn::Sequential model = residual(1, devices.front());
    return plan(model, {b.x, b.y, cross_entropy}, devices,
                {.schedules = {schedule}, .chunks = {chunks}});
  }();
  CAPTURE(p.explain());
  REQUIRE(p.exact_memory);
  REQUIRE(p.balance.size() == 2);
  REQUIRE(p.balance[0] >= 3);  // stage 0 stashes, stage 1 pops
  REQUIRE(p.balance[0] <= 6);
  const Measured m = train(residual(1, devices.front()), p, devices, b);
  for (size_t w = 0; w < 2; ++w) {
    CAPTURE(w);
    const DevicePeak& peak = p.peaks[w];
    if (chunks == 1) {
      CHECK(peak.low == peak.high);
      CHECK(m.peak[w] == peak.predicted);
    } else {
      CHECK(peak.low <= m.peak[w]);
      CHECK(m.peak[w] <= peak.high);
    }
  }
}

TEST_CASE("one worker, two virtual stages, a cut inside a skip: under a 16-bit policy the "
          "message is a copy and the portal is not") {
  // Between two stages of one worker the runtime narrows and widens a message into new
  // tensors under a 16-bit policy (MemoryModel::copied_handoffs), but hands a portal over as it
  // is (Note [16-bit messages]): the replay must count the first as an arriving message and
  // the second as a copy-free hand-off. One worker orders everything: exact peaks.
  const autograd::Precision precision =
      GENERATE(autograd::Precision::kFloat32, autograd::Precision::kBFloat16);
  const int chunks = GENERATE(1, 2);
  CAPTURE(autograd::precision_name(precision), chunks);
  const std::vector<Device> devices{Device::cpu(precision == autograd::Precision::kFloat32
                                                    ? 65 + chunks
                                                    : 67 + chunks)};
  const Batch b = batch(Device::cpu(99));
  const Plan p = [&] {
    nn::Sequential model = residual(1, devices.front());
    return plan(model, {b.x, b.y, cross_entropy}, devices,
                {.schedules = {"interleaved-1f1b"},
                 .chunks = {chunks},
                 .virtual_stages = {2},
                 .precision = precision});
  }();
  CAPTURE(p.explain());
  REQUIRE(p.exact_memory);
  REQUIRE(p.virtual_stages == 2);
  REQUIRE(p.balance[0] >= 3);  // stage 0 stashes, stage 1 pops
  REQUIRE(p.balance[0] <= 6);
  const Measured m = train(residual(1, devices.front()), p, devices, b);
  CHECK(p.peaks[0].low == p.peaks[0].high);
  CHECK(m.peak[0] == p.peaks[0].predicted);
}

TEST_CASE("probe_stage: a skip passing over the whole stage is refused, naming it") {
  nn::Sequential model = residual(1, Device::cpu(0));
  const Batch b = batch(Device::cpu(99));
  CHECK_THROWS_WITH(probe_stage(model, 3, 5, 8, b.x, b.y, cross_entropy),
                    Catch::Contains("probe_stage: skip ") &&
                        Catch::Contains("passes over layers [3, 5) whole"));
  // Either end inside the skip is a portal: measured.
  const StageMemory stashes = probe_stage(model, 0, 4, 8, b.x, b.y, cross_entropy);
  const StageMemory pops = probe_stage(model, 4, 9, 8, b.x, b.y, cross_entropy);
  const int64_t row_bytes = 8 * kHidden * 4;  // the skip: 8 rows of kHidden floats
  CHECK(stashes.output_bytes == 8 * kResidualWide * 4 + row_bytes);
  CHECK(pops.input_bytes == 8 * kResidualWide * 4 + row_bytes);
  CHECK(pops.grad_input_bytes == pops.input_bytes);
}

TEST_CASE("the estimate of a stage's recorded forward is the probe's measure, for a chain") {
  // Note [Additive stage costs] (stage_estimate.cc): a chain's forward adds up from the
  // profile's layers, each layer's output dropped where the next layer keeps nothing of it
  // (ReLU after BatchNorm: BatchNorm's output goes once ReLU has run). Under a 16-bit
  // policy the messages are the narrowed outputs (LayerProfile::message_bytes), the cell
  // holds its input widened and rounds each layer's output after dropping the layer's input
  // handle (as the profile does): still exact.
  const autograd::Precision precision =
      GENERATE(autograd::Precision::kFloat32, autograd::Precision::kBFloat16);
  CAPTURE(autograd::precision_name(precision));
  nn::Sequential model = mlp(1, Device::cpu(53));
  const Batch b = batch(Device::cpu(99));
  const ModelProfile profile = profile_model(
      model, b.x, b.y, cross_entropy,
      {.rows = {4, kRows}, .deferred_batch_norm = true, .precision = precision});
  for (const auto& [first, last] : {std::pair{0, 4}, std::pair{2, 7}, std::pair{4, 9}}) {
    for (int64_t rows : {int64_t{4}, int64_t{16}, kRows}) {
      CAPTURE(first, last, rows);
      const StageMemory estimate = estimate_stage_memory(profile, first, last, rows);
      const StageMemory measured =
          probe_stage(model, first, last, rows, b.x, b.y, cross_entropy,
                      {.deferred_batch_norm = true, .precision = precision});
      CHECK(estimate.input_bytes == measured.input_bytes);
      CHECK(estimate.output_bytes == measured.output_bytes);
      CHECK(estimate.grad_output_bytes == measured.grad_output_bytes);
      CHECK(estimate.grad_input_bytes == measured.grad_input_bytes);
      CHECK(estimate.forward.delta == measured.forward.delta);
      CHECK(estimate.forward.peak == measured.forward.peak);
      CHECK(estimate.forward_first.delta == measured.forward_first.delta);
      CHECK(estimate.recompute.delta == measured.recompute.delta);
      CHECK(estimate.checkpoint.delta == measured.checkpoint.delta);
      CHECK(estimate.backward.delta == measured.backward.delta);
      CHECK(estimate.backward_input.delta + estimate.weight.delta ==
            measured.backward_input.delta + measured.weight.delta);
    }
  }
}

TEST_CASE("a model on the host is not planned for GPUs: its profile would be the CPU's") {
  nn::Sequential model = mlp(1, Device::cpu(51));
  const Batch b = batch(Device::cpu(99));
  CHECK_THROWS_WITH(plan(model, {b.x, b.y, cross_entropy}, {Device::cuda(0)}),
                    Catch::Contains("the model's parameters are on cpu:51 but the plan is for "
                                    "cuda:0") &&
                        Catch::Contains("move it to a cuda device first (model.to(cuda:0))"));
}

TEST_CASE("a plan's cache: the next plan for the same model and batch reads it, and says so") {
  const std::vector<Device> devices{Device::cpu(47), Device::cpu(48)};
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/plan_cache_test.json";
  std::remove(path.c_str());
  const Batch b = batch(Device::cpu(99));
  // No runtime overhead measured: the same profile then gives the same search.
  const PlanOptions options{.schedules = {"1f1b"},
                            .chunks = {2},
                            .deferred_batch_norm = true,
                            .cache = path,
                            .runtime_overhead = RuntimeOverhead{}};
  nn::Sequential model = mlp(1, devices.front());
  const Plan first = plan(model, {b.x, b.y, cross_entropy}, devices, options);
  CHECK_FALSE(first.profile_from_cache);
  REQUIRE(std::ifstream(path).good());
  const Plan second = plan(model, {b.x, b.y, cross_entropy}, devices, options);
  CHECK(second.profile_from_cache);
  CHECK(second.str() == first.str());
  CHECK(second.step_time_us == first.step_time_us);
  for (size_t w = 0; w < devices.size(); ++w) CHECK(second.peaks[w].high == first.peaks[w].high);
  CHECK(second.explain().find("the profile read from the cache") != std::string::npos);
  // Another batch shape is another profile: profiled again (and the file rewritten).
  const Tensor half_x = b.x.slice(0, b.x.size(0) / 2), half_y = b.y.slice(0, b.y.size(0) / 2);
  CHECK_FALSE(plan(model, {half_x, half_y, cross_entropy}, devices, options).profile_from_cache);
  std::remove(path.c_str());
  // TF32 would time a GPU's products otherwise: the float32 matmul precision is in the key.
  const std::string key = profile_fingerprint(model, b.x, b.y, 1, true);
  set_float32_matmul_precision(Float32MatmulPrecision::kHigh);
  const std::string tf32_key = profile_fingerprint(model, b.x, b.y, 1, true);
  set_float32_matmul_precision(Float32MatmulPrecision::kHighest);
  CHECK(tf32_key == key + " | float32 matmuls high");
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

// An activation-heavy chain (a Linear, six ReLUs keeping 12 rows x 256 floats each, a Linear)
// on two workers with 1F1B and 4 micro-batches: worker 0 holds two cells of stage 0 at once,
// worker 1 one cell of stage 1. Without recomputes the best cut still needs about 2/3 of a
// micro-batch's activations on one device (every cut is replayed here, not only the
// planner's); recomputing the cells of stage 0 that are held while another's backward runs
// brings that to about 1/2. A cap between the two is met only by recomputing some cells and
// not others: no global checkpoint mode but 'always' fits, and that one is slower.
namespace {

constexpr int64_t kWide = 256;

nn::Sequential relu_chain(Device device) {
  Generator g(5);
  GeneratorGuard guard(g);
  const TensorOptions on{.device = device};
  nn::Sequential m;
  m.push_back(nn::Linear(kIn, kWide, true, on));
  for (int k = 0; k < 6; ++k) m.push_back(nn::ReLU());
  m.push_back(nn::Linear(kWide, kClasses, true, on));
  return m;
}

// The least, over every cut of the chain into two stages, of the larger device's peak
// (DevicePeak::high: whatever the messages' timing) of 1F1B without recomputes.
int64_t least_peak_without_recompute(const Batch& b, Device device) {
  const Schedule schedule = make_schedule("1f1b", 2, 4);
  const ScheduleReplay sim = replay_schedule(schedule, Costs::unit());
  int64_t least = -1;
  for (int cut = 1; cut < 8; ++cut) {
    nn::Sequential model = relu_chain(device);
    MemoryModel memory;
    memory.optimizer_state_factor = 2;  // Adam
    memory.full = {probe_stage(model, 0, cut, kRows / 4, b.x, b.y, cross_entropy),
                   probe_stage(model, cut, 8, kRows / 4, b.x, b.y, cross_entropy)};
    memory.tail = memory.full;
    int64_t peak = 0;
    for (const DevicePeak& d : replay_memory(schedule, sim, memory, true)) {
      peak = std::max(peak, d.high);
    }
    if (least < 0 || peak < least) least = peak;
  }
  return least;
}

}  // namespace

TEST_CASE("a cap only a partial recompute placement fits") {
  const std::vector<Device> devices{Device::cpu(47), Device::cpu(48)};
  const Batch b = batch(Device::cpu(99));
  auto plan_at = [&](int64_t cap) {
    nn::Sequential model = relu_chain(devices.front());
    // The layers' times alone: this model's layers take a few microseconds, less than the
    // runtime's own cost per action (Note [Runtime overhead]), which would decide the
    // placement here instead of the idle time this test is about.
    return plan(model, {b.x, b.y, cross_entropy}, devices,
                {.memory_cap_bytes = cap,
                 .schedules = {"1f1b"},
                 .chunks = {4},
                 .runtime_overhead = RuntimeOverhead{}});
  };
  int64_t smallest = 0;
  try {
    plan_at(1024);
    FAIL("a 1 KiB cap was accepted");
  } catch (const NoPlanFits& e) {
    smallest = e.smallest_cap_bytes();
  }
  const int64_t without = least_peak_without_recompute(b, devices.front());
  CAPTURE(smallest, without);
  REQUIRE(smallest < without);
  const int64_t cap = smallest + (without - smallest) / 2;
  const Plan p = plan_at(cap);
  CAPTURE(cap, p.explain());
  // Worker 0 runs F0 F1 B0 F2 B1 F3 B2 B3: the cells recorded while another's backward runs
  // are micro-batches 1, 2 and 3 of stage 0; stage 1 holds one cell at a time anyway.
  std::vector<std::pair<int, int>> recomputed;
  for (const auto& list : p.schedule.actions) {
    for (const Action& a : list) {
      if (a.kind == ActionKind::kRecompute) recomputed.push_back({a.stage, a.microbatch});
    }
  }
  std::sort(recomputed.begin(), recomputed.end());
  CHECK(recomputed == std::vector<std::pair<int, int>>{{0, 1}, {0, 2}, {0, 3}});
  CHECK(p.recomputed == 3);
  // The plan draws its own timeline: R cells on worker 0 alone, for micro-batches 1, 2, 3.
  const std::string timeline = p.timeline();
  CAPTURE(timeline);
  const size_t second_row = timeline.find("\nworker 1");
  REQUIRE(second_row != std::string::npos);
  for (const char* r : {"R1", "R2", "R3"}) CHECK(timeline.find(r) < second_row);
  CHECK(timeline.find("R0") == std::string::npos);
  CHECK(timeline.find('R', second_row) == std::string::npos);
  CHECK(p.explain().find(timeline) != std::string::npos);
  // Each R runs while worker 0 waits for worker 1's gradient: the step is as long as 1F1B's
  // without a recompute, timed with the same costs.
  CHECK(p.step_time_us == Approx(replay_schedule(one_f_one_b(2, 4), p.costs).makespan));
  // The global modes on the plan's cut: except_last does not fit, always does and is slower.
  for (const PlanAlternative& a : p.alternatives) {
    CAPTURE(a.config);
    if (a.config.find("checkpoint except_last") != std::string::npos) CHECK_FALSE(a.fits);
    if (a.config.find("checkpoint always") != std::string::npos) {
      CHECK(a.fits);
      CHECK(a.step_time_us > p.step_time_us);
    }
  }
  // Trained as planned, each device stays within its predicted bounds, so within the cap.
  Pipe pipe(relu_chain(devices.front()), p.pipe_options(devices));
  nn::Adam adam(pipe.parameters(), {.lr = 1e-3});
  auto step = [&] {
    adam.zero_grad();
    pipe.train_step(b.x, b.y, cross_entropy);
    pipe.step(adam);
  };
  step();
  adam.zero_grad();
  for (const Device& d : devices) allocator_for(d).reset_peak();
  step();
  for (int w = 0; w < 2; ++w) {
    const DevicePeak& peak = p.peaks[static_cast<size_t>(w)];
    const int64_t measured = allocator_for(devices[static_cast<size_t>(w)]).peak();
    CHECK(peak.low <= measured);
    CHECK(measured <= peak.high);
    CHECK(peak.high <= cap);
  }
}
