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
#include "examples/fashion_mnist/trainer.h"

namespace {

using pipewright::Device;
using pipewright::examples::TrainConfig;

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::string part;
  for (char c : text + ",") {
    if (c == ',') {
      if (!part.empty()) parts.push_back(part);
      part.clear();
    } else if (c != ' ') {
      part += c;
    }
  }
  return parts;
}

}  // namespace

int main(int argc, char** argv) {
  TrainConfig config;
  std::string checkpoint = "never";
  std::string devices, balance;
  std::vector<int64_t> hidden = config.hidden;
  bool no_progress = false;

  CLI::App app{"Train an MLP on Fashion-MNIST through a pipewright pipeline."};
  app.option_defaults()->always_capture_default();
  app.add_option("--epochs", config.epochs, "Passes over the 60,000 training images");
  app.add_option("--stop-after", config.stop_after, "Stop after this epoch (resume later with --resume; 0: run all)");
  app.add_option("--batch-size", config.batch_size, "Images per mini-batch (split into --chunks micro-batches)");
  app.add_option("--lr", config.lr, "Learning rate");
  app.add_option("--lr-schedule", config.lr_schedule, "cosine (per step, from --lr down to 0) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}));
  app.add_option("--optimizer", config.optimizer, "sgd (momentum 0.9) or adam")
      ->check(CLI::IsMember({"sgd", "adam"}));
  app.add_option("--weight-decay", config.weight_decay, "L2 weight decay");
  app.add_option("--hidden", hidden, "Hidden layer widths, e.g. --hidden 1024 1024");
  app.add_option("--dropout", config.dropout, "Dropout probability after each hidden layer (0: none)");
  app.add_option("--stages", config.stages, "Pipeline stages (one worker thread and CPU device each)");
  app.add_option("--balance", balance, "Layers per stage, comma-separated, or auto-time / auto-size to profile the layers (default: even split by parameters)");
  app.add_option("--chunks", config.chunks, "Micro-batches per mini-batch");
  app.add_option("--checkpoint", checkpoint, "Activation checkpointing: always, except_last or never")
      ->check(CLI::IsMember({"always", "except_last", "never"}));
  app.add_option("--schedule", config.schedule, "Pipeline schedule: gpipe, 1f1b, interleaved-1f1b, zb-h1");
  app.add_option("--data-parallel", config.data_parallel, "Replicas of the pipeline, each on its share of every mini-batch (needs mpirun -np stages*data-parallel)");
  app.add_option("--devices", devices, "Device per stage, comma-separated, e.g. cpu:0,cpu:1 (default cpu:0..)");
  app.add_option("--threads", config.threads, "Intra-op threads per stage worker (0: cores / stages)");
  app.add_option("--seed", config.seed, "Seed of weights, shuffling and dropout");
  app.add_option("--data-dir", config.data_dir, "Fashion-MNIST IDX files (default: Debian's dataset-fashion-mnist)");
  app.add_option("--train-limit", config.train_limit, "Use only the first N training images (0: all)");
  app.add_option("--test-limit", config.test_limit, "Use only the first N test images (0: all)");
  app.add_option("--save", config.save, "Write a checkpoint (safetensors) here after every epoch");
  app.add_option("--resume", config.resume, "Continue from a checkpoint written by --save");
  app.add_option("--trace", config.trace, "Write the Chrome trace (chrome://tracing, Perfetto) of the first step");
  app.add_flag("--no-progress", no_progress, "Do not draw the progress bar");
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
    config.checkpoint = pipewright::pipeline::parse_checkpoint(checkpoint);
    for (const std::string& d : split_commas(devices)) config.devices.push_back(Device::parse(d));
    if (balance.rfind("auto-", 0) == 0) {
      config.auto_balance = balance.substr(5);
    } else {
      for (const std::string& b : split_commas(balance)) config.balance.push_back(std::stoi(b));
    }
    config.progress = !no_progress;
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
