// tools/bazel run //examples:fashion_mnist -- [flags]
//
// Trains an MLP on Fashion-MNIST through pipewright's pipeline on virtual CPU devices and
// reports, per epoch, train loss, test accuracy, time, throughput, measured bubble and peak
// memory per stage. --help lists every flag.
#include <exception>
#include <iostream>
#include <vector>

#include <CLI/CLI.hpp>

#include "examples/fashion_mnist/flags.h"
#include "examples/fashion_mnist/trainer.h"

int main(int argc, char** argv) {
  pipewright::examples::TrainConfig config;
  std::vector<int64_t> hidden = config.hidden;

  CLI::App app{"Train an MLP on Fashion-MNIST through a pipewright pipeline."};
  pipewright::examples::TrainFlags flags(app, config);
  app.add_option("--hidden", hidden, "Hidden layer widths, e.g. --hidden 1024 1024");
  app.add_option("--dropout", config.dropout,
                 "Dropout probability after each hidden layer (0: none)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (!hidden.empty()) config.hidden = hidden;
    flags.apply();
    pipewright::examples::train(config, std::cout);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
