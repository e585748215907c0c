// tools/bazel run //examples:fashion_mnist -- [flags]
// mpirun -np 4 bazel-bin/examples/fashion_mnist --stages 2 --data-parallel 2
//
// Trains an MLP on Fashion-MNIST through pipewright's pipeline on virtual CPU devices and
// reports, per epoch, train loss, test accuracy, time, throughput, measured bubble and peak
// memory per stage. --help lists every flag.
//
// Started by mpirun, every rank runs this program: rank = replica * stages + stage trains
// its stage of its replica (distributed/mpi_processes.h), rank 0 prints. An error on any
// rank is printed by the ranks that see it (naming the rank, stage and micro-batch where it
// began) and ends the whole job (MPI_Abort) with exit status 1. Without mpirun MPI is not
// started at all and the program runs as one process.
#include <chrono>
#include <exception>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "distributed/mpi.h"
#include "examples/fashion_mnist/flags.h"
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
                 "mpirun -np stages*data-parallel)");
  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<pipewright::distributed::MpiSession> mpi;
  try {
    if (pipewright::distributed::launched_by_mpirun()) {
      mpi = std::make_unique<pipewright::distributed::MpiSession>(&argc, &argv);
      config.distributed = true;
      const int needed = config.stages * config.data_parallel;
      if (mpi->world_size() != needed) {
        throw std::invalid_argument(
            "mpirun started " + std::to_string(mpi->world_size()) + " processes, but --stages " +
            std::to_string(config.stages) + " x --data-parallel " +
            std::to_string(config.data_parallel) + " needs " + std::to_string(needed) +
            " (mpirun -np " + std::to_string(needed) + ")");
      }
    }
    if (!hidden.empty()) config.hidden = hidden;
    flags.apply();
    pipewright::examples::train(config, std::cout);
  } catch (const std::exception& e) {
    if (mpi == nullptr) {
      std::cerr << "error: " << e.what() << "\n";
      return 1;
    }
    std::cerr << "rank " << mpi->world_rank() << ": error: " << e.what() << "\n" << std::flush;
    // A moment for the failure notice to reach the other ranks (they print the origin too),
    // then end the whole job.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    mpi->abort(1);
  }
  return 0;
}
