// End-to-end on GPUs: a small denoising autoencoder (examples/fashion_mnist_autoencoder)
// trained through the pipeline on cuda:0,cuda:1 against the same run on cpu:0,cpu:1: the MSE
// loss and its gradient on the GPU, and both U-Net skips crossing from one GPU to the other
// (a portal each way per micro-batch). One epoch of the first 1,024 training images (16 steps
// of 64, SGD at lr 0.2), scored on the first 200 test images. Under --config=cudasim the GPUs are
// simulated and every unordered stream access is refused as a race; skipped without GPUs.
//
// Both runs start from the same weights and see the same noise (Philox is bit for bit on CPU
// and CUDA), so they differ only by float32 summation orders (~1e-6 relative per op,
// docs/cuda.md). With SGD (momentum 0.9) those stay at rounding level for the whole run, as in
// fashion_mnist_gpu_test: every step's loss and the test MSE within 1e-5 relative, every final
// weight and BatchNorm buffer within 1e-4 + 1e-3·|cpu|.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "examples/fashion_mnist_autoencoder/autoencoder.h"
#include "tests/cuda/gpu_test.h"

namespace {

using pipewright::Device;
using pipewright::Tensor;
using pipewright::examples::AutoencoderOptions;
using pipewright::examples::TrainConfig;
using pipewright::examples::TrainResult;
using pipewright::pipeline::Checkpoint;

const AutoencoderOptions kSmall{.widths = {64, 32, 16}, .noise = 0.5};

// Encoder (children 0-7: both stashes) on the first device, the rest (8-19: both pops) on
// the second.
TrainConfig config(bool gpu, const std::string& schedule, Checkpoint checkpoint) {
  TrainConfig c;
  c.optimizer = "sgd";
  c.lr = 0.2;
  c.epochs = 1;
  c.batch_size = 64;
  c.stages = 2;
  c.balance = {8, 12};
  c.chunks = 4;
  c.schedule = schedule;
  c.checkpoint = checkpoint;
  c.dropout = 0;
  c.train_limit = 1024;
  c.test_limit = 200;
  c.progress = false;
  c.seed = 4;
  c.devices = gpu ? std::vector<Device>{Device::cuda(0), Device::cuda(1)}
                  : std::vector<Device>{Device::cpu(0), Device::cpu(1)};
  return c;
}

void check_gpu_matches_cpu(const std::string& schedule, Checkpoint checkpoint) {
  if (!pipewright::testing::gpus_available_or_skip(2)) return;
  std::ostringstream log;
  const auto task = pipewright::examples::autoencoder_task(kSmall);
  const TrainResult gpu =
      pipewright::examples::train(config(true, schedule, checkpoint), log, task);
  const TrainResult cpu =
      pipewright::examples::train(config(false, schedule, checkpoint), log, task);
  INFO(log.str());
  REQUIRE(gpu.epochs.size() == 1);
  REQUIRE(cpu.epochs.size() == 1);
  const auto& g = gpu.epochs[0];
  const auto& c = cpu.epochs[0];
  REQUIRE(g.step_losses.size() == 16);
  REQUIRE(c.step_losses.size() == 16);
  // It learned something (SGD is slow on this model; the CPU test shows it denoising).
  CHECK(c.step_losses.back() < 0.85 * c.step_losses.front());
  double worst_step = 0;
  for (size_t i = 0; i < c.step_losses.size(); ++i) {
    INFO("step " << i << ": gpu " << g.step_losses[i] << ", cpu " << c.step_losses[i]);
    const double rel = std::abs(g.step_losses[i] - c.step_losses[i]) / c.step_losses[i];
    CHECK(rel <= 1e-5);
    worst_step = std::max(worst_step, rel);
  }
  INFO("test mse: gpu " << g.test_loss << ", cpu " << c.test_loss);
  CHECK(c.test_loss > 0);
  CHECK(std::abs(g.test_loss - c.test_loss) <= 1e-5 * c.test_loss);
  REQUIRE(gpu.final_state.size() == cpu.final_state.size());
  double worst_state = 0;
  for (size_t i = 0; i < cpu.final_state.size(); ++i) {
    INFO(cpu.final_state[i].first);
    const std::vector<double> gv =
        gpu.final_state[i].second.to(pipewright::DType::kFloat64).contiguous().to_vector<double>();
    const std::vector<double> cv =
        cpu.final_state[i].second.to(pipewright::DType::kFloat64).contiguous().to_vector<double>();
    REQUIRE(gv.size() == cv.size());
    double worst = 0;
    for (size_t k = 0; k < cv.size(); ++k) {
      const double ratio = std::abs(gv[k] - cv[k]) / (1e-4 + 1e-3 * std::abs(cv[k]));
      worst = std::isnan(ratio) ? INFINITY : std::max(worst, ratio);
    }
    CHECK(worst <= 1.0);
    worst_state = std::max(worst_state, worst);
  }
  std::cout << schedule << " checkpoint " << pipewright::pipeline::to_string(checkpoint)
            << ": step loss first gpu " << g.step_losses[0] << " cpu " << c.step_losses[0]
            << ", last gpu " << g.step_losses.back() << " cpu " << c.step_losses.back()
            << " | worst step rel diff " << worst_step << " | test mse gpu " << g.test_loss
            << " cpu " << c.test_loss << " | worst state ratio " << worst_state << "\n";
  REQUIRE(g.peak_bytes.size() == 2);
  CHECK(g.peak_bytes[0] > 0);
  CHECK(g.peak_bytes[1] > 0);
}

}  // namespace

TEST_CASE("the autoencoder on cuda:0,cuda:1 trains like on cpu:0,cpu:1 (GPipe)") {
  check_gpu_matches_cpu("gpipe", Checkpoint::kNever);
}

TEST_CASE(
    "the autoencoder on cuda:0,cuda:1 trains like on cpu:0,cpu:1 (1F1B, checkpoint except_last)") {
  check_gpu_matches_cpu("1f1b", Checkpoint::kExceptLast);
}
