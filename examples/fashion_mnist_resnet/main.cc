// tools/bazel run //examples:fashion_mnist_resnet -- [flags]
//
// Trains a residual MLP (resnet.h) on Fashion-MNIST through a 3-stage pipeline on virtual CPU
// devices; its identity skips are stash/pop layers, and those the cut splits cross stages as
// portals (the header lists each skip's route). Same flags and output as
// //examples:fashion_mnist, with --width, --blocks and --dropout for the model.
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "examples/common/flags.h"
#include "examples/fashion_mnist/trainer.h"
#include "examples/fashion_mnist_resnet/resnet.h"

int main(int argc, char** argv) {
  using namespace pipewright::examples;
  TrainConfig config;
  config.workers = 3;
  config.epochs = 10;
  ResNetOptions model;

  CLI::App app{"Train a residual MLP on Fashion-MNIST through a 3-stage pipewright pipeline."};
  TrainFlags flags(app, config);
  app.add_option("--width", model.width, "Width of the stem and of every residual block");
  app.add_option("--blocks", model.blocks,
                 "Residual blocks (Linear-BatchNorm-ReLU twice, plus the input)");
  app.add_option("--dropout", model.dropout, "Dropout probability inside each block (0: none)");
  CLI11_PARSE(app, argc, argv);

  try {
    flags.apply();
    config.dropout = model.dropout;  // part of the checkpoint's fingerprint
    train(config, std::cout, resnet_task(model));
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
