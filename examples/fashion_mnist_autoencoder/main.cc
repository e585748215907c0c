// tools/bazel run //examples:fashion_mnist_autoencoder -- [flags]
//
// Trains a denoising autoencoder with U-Net-style skips (autoencoder.h) on Fashion-MNIST
// through a 3-stage pipeline with the MSE loss; prints train and test MSE per epoch against
// the identity map's (output = noisy input), and at the end writes a PNG grid with one row
// per class: noisy input | output | clean image. Same pipeline and training flags as
// //examples:fashion_mnist, with --widths, --noise and --png.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "data/fashion_mnist.h"
#include "examples/common/flags.h"
#include "examples/common/progress.h"
#include "examples/fashion_mnist/trainer.h"
#include "examples/fashion_mnist_autoencoder/autoencoder.h"
#include "examples/fashion_mnist_autoencoder/png.h"

int main(int argc, char** argv) {
  using namespace pipewright;
  using namespace pipewright::examples;
  TrainConfig config;
  config.workers = 3;
  config.epochs = 5;
  config.dropout = 0;
  AutoencoderOptions model;
  std::string png = "fashion_mnist_autoencoder.png";

  CLI::App app{
      "Train a denoising autoencoder on Fashion-MNIST through a 3-stage pipewright pipeline "
      "(default cut: encoder | bottleneck and innermost decoder level | the rest)."};
  TrainFlags flags(app, config);
  app.add_option("--widths", model.widths,
                 "Encoder widths, the last is the bottleneck; the decoder mirrors them")
      ->check(whole_number_entries());
  app.add_option("--noise", model.noise,
                 "Standard deviation of the Gaussian noise on pixels in [0, 1]");
  app.add_option("--png", png, "Where to write the grid noisy | output | clean, one row per class");
  CLI11_PARSE(app, argc, argv);

  try {
    flags.apply();
    if (config.balance.empty() && config.auto_balance.empty() && config.workers == 3) {
      config.balance = unet_balance(model);
    }
    const TrainResult result = train(config, std::cout, autoencoder_task(model));

    data::FashionMnistOptions images{.mean = 0.0, .std = 1.0};
    if (config.test_limit > 0) images.limit = config.test_limit;
    const data::Dataset test = data::load_fashion_mnist(
        config.data_dir.empty() ? data::kDefaultFashionMnistDir : config.data_dir,
        data::Split::kTest, images);
    const double identity =
        mean_squared_error(noisy_test_images(test.inputs(), model.noise), test.inputs());
    if (!result.epochs.empty()) {
      const double mse = result.epochs.back().test_loss;
      std::cout << "test mse " << format_fixed(mse, 4) << " vs identity map "
                << format_fixed(identity, 4);
      if (identity > 0) std::cout << " (" << format_fixed(mse / identity, 3) << " of it)";
      std::cout << " on " << test.size() << " noisy test images\n";
    }
    const Reconstructions r = reconstruct_per_class(model, result.final_state, test);
    const GreyImage grid = image_grid({r.noisy, r.output, r.clean});
    const std::string path = user_path(png);
    write_png(path, grid);
    std::cout << "wrote " << path << " (" << grid.width << " x " << grid.height
              << "): noisy | output | clean, one row per class\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
