// End-to-end on GPUs: the Fashion-MNIST example trained through the pipeline on cuda:0,cuda:1
// against the same run on cpu:0,cpu:1 (GPipe, 1F1B, GPipe with every cell recomputed), one
// epoch of the first 2,048 training images (32 steps of 64) and the first 1,000 test images of
// the real data. Under --config=cudasim the GPUs are simulated and every unordered stream
// access is refused as a race (the run throws); on a real machine the test binary is copied
// there and run like tests/cuda's (docs/cuda.md).
//
// Both runs start from the same weights and see the same batches and dropout masks (Philox is
// bit for bit on CPU and CUDA), so they differ only by the float32 summation orders of GEMMs,
// reductions and BatchNorm (docs/cuda.md, "Precision against the CPU kernels": ~1e-6 relative
// per op).
//
// SGD with momentum keeps those differences at rounding level for the whole run (measured
// under cudasim: per-step losses within 2.2e-7 relative, weights and buffers within 2e-6), so
// its bounds are tight: first and every step's loss relative 1e-5, test accuracy within 0.01
// (at most 10 of 1,000 images decided differently; measured: equal), every final weight and
// BatchNorm buffer |gpu - cpu| <= 1e-4 + 1e-3·|cpu|. A wrong kernel, a stale or reordered
// activation, a lost gradient moves these by orders of magnitude more.
//
// Adam (the example's default) amplifies rounding noise by design: it divides each gradient by
// its own RMS, so a gradient that is exactly zero in exact arithmetic but ±1e-9 in float32
// becomes a ±lr step. The bias of a Linear before a BatchNorm is such a parameter (BatchNorm
// subtracts it out): on CPU and GPU it random-walks differently by up to lr per step, which
// shows in the BatchNorm running means (measured: 0.008 vs -0.039 after 32 steps) but not in
// the loss. Its per-step losses drift apart slowly (measured: 5e-3 relative at worst), so the
// Adam case checks the first step at 1e-5, every step at 2e-2, accuracy within 0.02 (the bound
// of the command-line comparison in docs/cuda.md) and no state.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "examples/fashion_mnist/trainer.h"
#include "tensor/ops.h"
#include "tensor/stream.h"
#include "tests/cuda/gpu_test.h"

namespace {

using pipewright::Device;
using pipewright::Tensor;
using pipewright::examples::TrainConfig;
using pipewright::examples::TrainResult;
using pipewright::examples::train;
using pipewright::pipeline::Checkpoint;

struct Bounds {
  double first_loss_rtol;
  double step_loss_rtol;
  double accuracy;
  bool compare_state;  // final weights and buffers within kStateAtol + kStateRtol·|cpu|
};
constexpr Bounds kSgdBounds{1e-5, 1e-5, 0.01, true};
constexpr Bounds kAdamBounds{1e-5, 2e-2, 0.02, false};
constexpr double kStateAtol = 1e-4;
constexpr double kStateRtol = 1e-3;

// The example's default model (784-512-512-10 with BatchNorm and dropout 0.2), smaller batches
// so one epoch of 2,048 images has 32 steps; SGD at lr 0.05 (momentum 0.9) or Adam at its
// default lr 1e-3, both on the cosine schedule.
TrainConfig config(const std::string& devices, const std::string& schedule, Checkpoint checkpoint,
                   const std::string& optimizer) {
  TrainConfig c;
  c.optimizer = optimizer;
  if (optimizer == "sgd") c.lr = 0.05;
  c.epochs = 1;
  c.batch_size = 64;
  c.chunks = 4;
  c.schedule = schedule;
  c.checkpoint = checkpoint;
  c.train_limit = 2048;
  c.test_limit = 1000;
  c.progress = false;
  c.seed = 3;
  if (devices == "cuda") {
    c.devices = {Device::cuda(0), Device::cuda(1)};
  } else {
    c.devices = {Device::cpu(0), Device::cpu(1)};
  }
  return c;
}

// Largest |gpu - cpu| / (atol + rtol·|cpu|) over every element of every state tensor: <= 1
// means within the bound.
double worst_state_ratio(const TrainResult& gpu, const TrainResult& cpu, std::string* where) {
  REQUIRE(gpu.final_state.size() == cpu.final_state.size());
  double worst = 0;
  for (size_t i = 0; i < cpu.final_state.size(); ++i) {
    REQUIRE(gpu.final_state[i].first == cpu.final_state[i].first);
    const Tensor g = gpu.final_state[i].second.to(pipewright::DType::kFloat64);
    const Tensor c = cpu.final_state[i].second.to(pipewright::DType::kFloat64);
    REQUIRE(g.device().is_cpu());
    REQUIRE(g.numel() == c.numel());
    const std::vector<double> gv = g.contiguous().to_vector<double>();
    const std::vector<double> cv = c.contiguous().to_vector<double>();
    for (size_t k = 0; k < cv.size(); ++k) {
      const double ratio = std::abs(gv[k] - cv[k]) / (kStateAtol + kStateRtol * std::abs(cv[k]));
      if (!(ratio <= worst)) {  // NaN counts as worst
        worst = std::isnan(ratio) ? INFINITY : ratio;
        *where = cpu.final_state[i].first + "[" + std::to_string(k) + "]: gpu " +
                 std::to_string(gv[k]) + ", cpu " + std::to_string(cv[k]);
      }
    }
  }
  return worst;
}

void check_gpu_matches_cpu(const std::string& schedule, Checkpoint checkpoint,
                           const std::string& optimizer, const Bounds& bounds) {
  if (!pipewright::testing::gpus_available_or_skip(2)) return;
  std::ostringstream log;
  const auto start = std::chrono::steady_clock::now();
  const TrainResult gpu = train(config("cuda", schedule, checkpoint, optimizer), log);
  const double gpu_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const TrainResult cpu = train(config("cpu", schedule, checkpoint, optimizer), log);
  INFO(log.str());
  REQUIRE(gpu.epochs.size() == 1);
  REQUIRE(cpu.epochs.size() == 1);
  const auto& g = gpu.epochs[0];
  const auto& c = cpu.epochs[0];

  REQUIRE(g.step_losses.size() == 32);
  REQUIRE(c.step_losses.size() == g.step_losses.size());
  double worst_step = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < c.step_losses.size(); ++i) {
    const double rel = std::abs(g.step_losses[i] - c.step_losses[i]) / std::abs(c.step_losses[i]);
    if (!(rel <= worst_step)) worst_step = rel, worst_at = i;
  }
  std::string where;
  const double state_ratio = worst_state_ratio(gpu, cpu, &where);
  std::cout << optimizer << " " << schedule << " checkpoint " << pipewright::pipeline::to_string(checkpoint)
            << ": first loss gpu " << g.step_losses[0] << " cpu " << c.step_losses[0]
            << " | worst step loss rel diff " << worst_step << " (step " << worst_at << ")"
            << " | acc gpu " << g.test_accuracy << " cpu " << c.test_accuracy
            << " | worst state ratio " << state_ratio << " (" << where << ")"
            << " | gpu run " << gpu_seconds << " s\n";

  // The run learned something (chance: loss ln 10 = 2.30, accuracy 0.1).
  CHECK(c.step_losses.back() < 1.5);
  CHECK(c.test_accuracy > 0.6);

  INFO("first step: gpu " << g.step_losses[0] << ", cpu " << c.step_losses[0]);
  CHECK(std::abs(g.step_losses[0] - c.step_losses[0]) <= bounds.first_loss_rtol * c.step_losses[0]);
  INFO("worst step " << worst_at << ": gpu " << g.step_losses[worst_at] << ", cpu "
                     << c.step_losses[worst_at] << " (relative " << worst_step << ")");
  CHECK(worst_step <= bounds.step_loss_rtol);
  CHECK(std::abs(g.train_loss - c.train_loss) <= bounds.step_loss_rtol * c.train_loss);
  INFO("test accuracy: gpu " << g.test_accuracy << ", cpu " << c.test_accuracy);
  CHECK(std::abs(g.test_accuracy - c.test_accuracy) <= bounds.accuracy);
  if (bounds.compare_state) {
    INFO("worst state element: " << where << " (" << state_ratio << " of the bound)");
    CHECK(state_ratio <= 1.0);
  }
  // Each GPU's allocator saw its stage's parameters and activations.
  REQUIRE(g.peak_bytes.size() == 2);
  CHECK(g.peak_bytes[0] > 0);
  CHECK(g.peak_bytes[1] > 0);
}

}  // namespace

TEST_CASE("fashion_mnist on cuda:0,cuda:1 trains like on cpu:0,cpu:1 (GPipe, SGD)") {
  check_gpu_matches_cpu("gpipe", Checkpoint::kNever, "sgd", kSgdBounds);
}

TEST_CASE("fashion_mnist on cuda:0,cuda:1 trains like on cpu:0,cpu:1 (1F1B, SGD)") {
  check_gpu_matches_cpu("1f1b", Checkpoint::kNever, "sgd", kSgdBounds);
}

TEST_CASE("fashion_mnist on cuda:0,cuda:1 trains like on cpu:0,cpu:1 (GPipe, checkpoint always, SGD)") {
  check_gpu_matches_cpu("gpipe", Checkpoint::kAlways, "sgd", kSgdBounds);
}

TEST_CASE("fashion_mnist on cuda:0,cuda:1 trains like on cpu:0,cpu:1 (GPipe, Adam: the default)") {
  check_gpu_matches_cpu("gpipe", Checkpoint::kNever, "adam", kAdamBounds);
}
