// Two training runs of the Fashion-MNIST example side by side: the settings the GPU-versus-CPU
// tests use, a smooth variant of the model, and how far two runs are apart.
//
// Note [Two correct GEMMs]
// Two correct float32 GEMMs (OpenBLAS's AVX2 and AVX-512 kernels, Eigen, cuBLAS) sum each dot
// product in another order, so their results differ by ~1e-7 of |A|·|B|. Through a smooth
// model (Linear, BatchNorm, tanh, dropout with the same masks, cross-entropy) such differences
// stay at that size step after step. A ReLU is not smooth: where an input lies within rounding
// of 0, one GEMM puts it on one side and the other on the other side, and that one element
// switches the gradient of its whole channel (through BatchNorm's backward, every sample of
// the micro-batch). Measured on the example's model (batch 64 in 4 micro-batches, SGD lr 0.05):
// a BatchNorm output 3.7e-7 from 0 in step 3 made OpenBLAS's AVX2 and AVX-512 kernels give
// weight gradients 1.2e-2 apart in that channel's row, and training then carried the
// difference to 1.5e-2 of the loss by step 28 — the same for OpenBLAS against Eigen, and what
// a real cuBLAS will do against either. With ~65,000 ReLU inputs a step, some step of a run
// meets such an input by chance. So:
//   - a comparison that must be tight runs the smooth model (smooth_task): one step from one
//     shared state, and whole runs;
//   - the example's own ReLU model is compared over a run with bounds measured between two
//     correct GEMMs over many seeds (relu_run_bounds, bench/gemm_divergence), and a CPU test
//     holds OpenBLAS against Eigen to the same bounds on every machine CI runs on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "examples/fashion_mnist/trainer.h"
#include "examples/fashion_mnist_autoencoder/autoencoder.h"
#include "pipeline/schedule/checkpoint_mode.h"
#include "tensor/device.h"

namespace pipewright::testing {

/// The example's model (784-512-512-10, BatchNorm, dropout 0.2) on `devices` (two), batches
/// of 64 in 4 micro-batches, one epoch of the first 2,048 training images (32 steps), the
/// first 1,000 test images; SGD (momentum 0.9) at lr 0.05 or Adam at lr 1e-3, cosine.
examples::TrainConfig cross_run_config(const std::vector<Device>& devices,
                                       const std::string& schedule,
                                       pipeline::Checkpoint checkpoint,
                                       const std::string& optimizer, uint64_t seed = 3);

/// The small denoising autoencoder (widths 64-32-16, noise 0.5, skips from one stage to the
/// other, MSE) on `devices` (two), cut 8 | 12, batches of 64 in 4 micro-batches, one epoch of
/// the first 1,024 training images (16 steps), scored on the first 200 test images; SGD
/// (momentum 0.9) at lr 0.2, cosine. Run it with autoencoder_cross_run_task().
examples::TrainConfig autoencoder_cross_run_config(const std::vector<Device>& devices,
                                                   const std::string& schedule,
                                                   pipeline::Checkpoint checkpoint,
                                                   uint64_t seed = 4);
examples::Task autoencoder_cross_run_task();

/// The example's model with tanh in place of ReLU and no bias in the Linear layers that a
/// BatchNorm follows (BatchNorm subtracts it; its gradient is 0 in exact arithmetic, which
/// Adam would turn into ±lr steps of rounding noise): every operation smooth, so two correct
/// GEMMs stay rounding-close (Note [Two correct GEMMs]).
nn::Sequential smooth_model(const std::vector<int64_t>& hidden, double dropout, uint64_t seed);
/// classifier_task() with smooth_model.
examples::Task smooth_task();

/// How far run `b` is from run `a` (the reference): relative loss differences, accuracy,
/// final state.
struct RunDistance {
  double first_loss = 0;       // |b - a| / |a| of the first step's loss
  double worst_step_loss = 0;  // the largest such ratio over the steps
  size_t worst_step = 0;       // at this step (0-based)
  double train_loss = 0;       // of the epoch's mean loss
  double accuracy = 0;         // |b - a| of the test accuracy
  double test_loss = 0;        // |b - a| / |a| of the test loss, where the task reports one
  /// max |b - a| / (1e-4 + 1e-3·|a|) over every element of every final state tensor.
  double state_ratio = 0;
  std::string worst_state;     // "1.running_mean[469]: a -0.015, b -0.144"
  std::string str() const;
};
/// Throws std::invalid_argument when the runs have different epochs, steps or state names.
RunDistance distance(const examples::TrainResult& a, const examples::TrainResult& b);

/// Bounds on RunDistance for two correct implementations of the same run.
struct RunBounds {
  double first_loss, worst_step_loss, train_loss, accuracy, test_loss;
  double state_ratio;  // infinity: the final state is not compared
};

/// For cross_run_config's runs, by model and optimizer ("sgd" or "adam"), a few times the
/// largest distance bench/gemm_divergence measured between OpenBLAS's and Eigen's GEMMs over
/// 20 seeds, with OpenBLAS's AVX2, AVX-512 and Cooper Lake kernels (docs/cuda.md, "Precision
/// against the CPU kernels", has the table):
/// - the smooth model stays at rounding level; with SGD its final weights and buffers too,
///   while Adam turns the rounding of gradients that are sums of cancelling products into
///   ±lr steps, so its final state is not compared;
/// - the ReLU model (the example's) drifts apart after a step meets an input within rounding
///   of 0 (Note [Two correct GEMMs]; 2 of 20 seeds with OpenBLAS's AVX-512 kernel against
///   Eigen): a step's loss by up to 1.8e-2, the epoch's mean loss by 1.4e-3, accuracy by
///   0.007; its final state is not compared.
/// Throws std::invalid_argument for another optimizer name.
RunBounds smooth_run_bounds(const std::string& optimizer);
RunBounds relu_run_bounds(const std::string& optimizer);
/// The autoencoder's (SGD; ReLU), measured the same way: 19 of 20 seeds stay at rounding level
/// (1.5e-7 of a step's loss), one met a ReLU input within rounding of 0: a step's loss 2.6e-4
/// apart, the epoch's mean loss 6e-5, the test MSE 5.7e-5; its final state is not compared.
RunBounds autoencoder_run_bounds();

/// The fields of `d` past their bound, e.g. {"worst_step_loss 0.0155 > 1e-05"}; empty when
/// every one is within.
std::vector<std::string> violations(const RunDistance& d, const RunBounds& bounds);

}  // namespace pipewright::testing
