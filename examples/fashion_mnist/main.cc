// tools/bazel run //examples:fashion_mnist -- [flags]
// mpirun -np 4 bazel-bin/examples/fashion_mnist --workers 2 --data-parallel 2
//
// Trains an MLP on Fashion-MNIST through pipewright's pipeline on virtual CPU devices and
// reports, per epoch, train loss, test accuracy, time, throughput, measured bubble and peak
// memory per stage. --help lists every flag.
//
// Started by mpirun, every rank runs this program: rank = replica * workers + worker trains
// its worker's stages of its replica (distributed/mpi_processes.h), rank 0 prints. An error
// on any rank is printed by the ranks that see it (naming the rank, stage and micro-batch
// where it began) and ends the whole job (MPI_Abort) with exit status 1. Without mpirun MPI
// is not started at all and the program runs as one process.
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "examples/common/example_main.h"
#include "examples/common/flags.h"
#include "examples/fashion_mnist/trainer.h"

int main(int argc, char** argv) {
  pipewright::examples::TrainConfig config;
  std::vector<int64_t> hidden = config.hidden;

  CLI::App app{"Train an MLP on Fashion-MNIST through a pipewright pipeline."};
  pipewright::examples::TrainFlags flags(app, config);
  app.add_option("--hidden", hidden, "Hidden layer widths, e.g. --hidden 1024 1024")
      ->check(pipewright::examples::whole_number_entries());
  app.add_option("--dropout", config.dropout,
                 "Dropout probability after each hidden layer (0: none)");
  app.add_option("--data-parallel", config.data_parallel,
                 "Replicas of the pipeline, each on its share of every mini-batch (needs "
                 "mpirun -np workers*data-parallel)");
  CLI11_PARSE(app, argc, argv);

  return pipewright::examples::run_example(&argc, &argv, config, [&] {
    if (!hidden.empty()) config.hidden = hidden;
    flags.apply();
    pipewright::examples::train(config, std::cout);
  });
}
