// End-to-end on GPUs: a small denoising autoencoder (examples/fashion_mnist_autoencoder)
// trained through a two-stage pipeline on GPUs (cuda:0,cuda:1, or both stages on cuda:0 where
// there is one GPU) against the same run on cpu:0,cpu:1: the MSE loss and its gradient on the
// GPU, and both U-Net skips crossing from one stage to the other (a portal each way per
// micro-batch). One epoch of the first 1,024 training images (16 steps of 64, SGD at lr 0.2),
// scored on the first 200 test images (tests/examples/cross_run.h). Under --config=cudasim the
// GPUs are simulated and every unordered stream access is refused as a race; skipped without
// GPUs.
//
// Both runs start from the same weights and see the same noise (Philox is bit for bit on CPU
// and CUDA), so they differ only by float32 summation orders, which a ReLU input within
// rounding of 0 can turn into a visible drift (Note [Two correct GEMMs]). The bounds are what
// two correct CPU GEMMs reached over 20 seeds (autoencoder_run_bounds): the first step's loss
// within 1e-5 relative, every step's within 1e-3, the test MSE within 3e-4.
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/cuda/gpu_test.h"
#include "tests/examples/cross_run.h"

namespace {

using namespace pipewright;
using pipewright::pipeline::Checkpoint;

void check_gpu_matches_cpu(const std::string& schedule, Checkpoint checkpoint) {
  const std::vector<Device> gpus = testing::two_stage_gpus();
  if (gpus.empty()) return;
  std::ostringstream log;
  const examples::Task task = testing::autoencoder_cross_run_task();
  const examples::TrainResult gpu =
      examples::train(testing::autoencoder_cross_run_config(gpus, schedule, checkpoint), log, task);
  const examples::TrainResult cpu = examples::train(
      testing::autoencoder_cross_run_config({Device::cpu(0), Device::cpu(1)}, schedule, checkpoint),
      log, task);
  INFO(log.str());
  const testing::RunDistance d = testing::distance(cpu, gpu);
  std::cout << schedule << " checkpoint " << pipeline::to_string(checkpoint) << " on "
            << gpus[0].str() << "," << gpus[1].str() << ": " << d.str() << "\n";
  const auto& c = cpu.epochs.at(0);
  REQUIRE(c.step_losses.size() == 16);
  // It learned something (SGD is slow on this model; the CPU test shows it denoising).
  CHECK(c.step_losses.back() < 0.85 * c.step_losses.front());
  CHECK(c.test_loss > 0);
  CHECK(testing::violations(d, testing::autoencoder_run_bounds()) == std::vector<std::string>{});
  REQUIRE(gpu.epochs.at(0).peak_bytes.size() == 2);
  CHECK(gpu.epochs[0].peak_bytes[0] > 0);
  CHECK(gpu.epochs[0].peak_bytes[1] > 0);
}

}  // namespace

TEST_CASE("the autoencoder on two GPU stages trains like on cpu:0,cpu:1 (GPipe)") {
  check_gpu_matches_cpu("gpipe", Checkpoint::kNever);
}

TEST_CASE("the autoencoder on two GPU stages trains like on cpu:0,cpu:1 (1F1B, checkpoint except_last)") {
  check_gpu_matches_cpu("1f1b", Checkpoint::kExceptLast);
}
