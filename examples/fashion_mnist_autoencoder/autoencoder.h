// A denoising autoencoder for Fashion-MNIST with U-Net-style skips: Gaussian noise is added to
// the images (pixels in [0, 1]), the model maps noisy images to clean ones, trained with MSE.
//
// widths {w1, ..., wk}: encoder levels 1..k-1, bottleneck k, decoder levels k-1..1 (here
// {512, 256, 64}: k = 3):
//
//   noisy 784 -> Linear·BN·ReLU -> w1 -> Stash(e1)                           encoder
//             -> Linear·BN·ReLU -> w2 -> Stash(e2)
//             -> Linear·BN·ReLU -> w3                                       bottleneck
//             -> Linear -> w2 -> AddStashed(e2) -> BN·ReLU                   decoder
//             -> Linear -> w1 -> AddStashed(e1) -> BN·ReLU
//             -> Linear -> 784                                               the clean image
//
// A decoder level adds the encoder's features of its width (U-Net joins them by
// concatenation; adding keeps the widths and costs nothing). The default cut over 3 stages,
// unet_balance, is encoder | bottleneck and the innermost decoder level | the other decoder
// levels and the output, so e(k-1) crosses one stage boundary and e1 goes straight from stage
// 0 to stage 2, past stage 1 (a portal; nn/skip.h).
//
// Noise: the training images get fresh noise every step, drawn from a Generator seeded with
// (config seed, step), so a run is reproducible and a resumed run sees the same noise; the
// test images get one fixed draw (Generator(kTestNoiseSeed)), the same for every epoch and
// every run. The identity map (output = noisy input) scores the noise variance σ² (nothing is
// clipped); a useful model scores far below it.
#pragma once

#include <cstdint>
#include <vector>

#include "examples/fashion_mnist/trainer.h"
#include "nn/sequential.h"
#include "tensor/tensor.h"

namespace pipewright::examples {

inline constexpr uint64_t kTestNoiseSeed = 20171128;  // any fixed value: one noisy test set

struct AutoencoderOptions {
  std::vector<int64_t> widths = {512, 256, 64};  // encoder levels, the last is the bottleneck
  double noise = 0.5;                            // σ of the noise, in pixel units ([0, 1])
};

/// The model above, weights drawn from a Generator seeded with `seed`. Throws
/// std::invalid_argument naming the value for fewer than 2 widths, a width < 1 or noise < 0.
nn::Sequential build_autoencoder(const AutoencoderOptions& options, uint64_t seed);

/// Children per stage for 3 stages: encoder | bottleneck + innermost decoder level | rest.
std::vector<int> unet_balance(const AutoencoderOptions& options);

/// clean + N(0, std²) elementwise, drawn from Generator(seed) in row-major order (so the first
/// rows get the same noise whatever the row count). clean: float32 [N, 784], any device.
Tensor add_noise(const Tensor& clean, double std, uint64_t seed);

/// The noisy test images: add_noise(clean, noise, kTestNoiseSeed).
Tensor noisy_test_images(const Tensor& clean, double noise);

/// Mean squared error over every pixel of the whole set: Σ (a - b)² / numel, in float64.
double mean_squared_error(const Tensor& a, const Tensor& b);

/// The task train() runs: images loaded as pixels in [0, 1], (noisy, clean) per step, MSE
/// loss, scored by the test MSE against the identity map's ("test mse 0.0123 (identity
/// 0.2464)"; EpochStats::test_loss is the test MSE); the header lists the skip routes.
Task autoencoder_task(const AutoencoderOptions& options);

/// The first test image of each class present in `test` (pixels in [0, 1], labels), its noisy
/// version and the trained model's output, rows in class order: the PNG grid's three columns.
struct Reconstructions {
  std::vector<int64_t> classes;
  Tensor noisy, output, clean;  // float32 [classes, 784] on the CPU
};
/// Runs the model of `state` (TrainResult::final_state) un-pipelined on the CPU in eval mode.
/// Throws std::invalid_argument when `state` does not fit the model `options` describe.
Reconstructions reconstruct_per_class(const AutoencoderOptions& options,
                                      const nn::NamedTensors& state, const data::Dataset& test);

}  // namespace pipewright::examples
