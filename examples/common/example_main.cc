#include "examples/common/example_main.h"

#include <chrono>
#include <exception>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <unistd.h>

#include "distributed/mpi.h"
#include "tensor/matmul_precision.h"

namespace pipewright::examples {

int run_example(int* argc, char*** argv, TrainConfig& config, const std::function<void()>& body) {
  std::unique_ptr<distributed::MpiSession> mpi;
  try {
    if (distributed::launched_by_mpirun()) {
      mpi = std::make_unique<distributed::MpiSession>(argc, argv);
      config.distributed = true;
      const int needed = config.workers * config.data_parallel;
      if (mpi->world_size() != needed) {
        throw std::invalid_argument(
            "mpirun started " + std::to_string(mpi->world_size()) + " processes, but --workers " +
            std::to_string(config.workers) + " x --data-parallel " +
            std::to_string(config.data_parallel) + " needs " + std::to_string(needed) +
            " (mpirun -np " + std::to_string(needed) + ")");
      }
    }
    set_float32_matmul_precision(config.float32_matmul_precision);
    body();
  } catch (const std::exception& e) {
    if (mpi == nullptr) {
      std::cerr << "error: " << e.what() << "\n";
      return 1;
    }
    // One write(2) per line: every rank may fail at once, and std::cerr (unbuffered) would send
    // each << as its own write, so mpirun could print "rank rank 10: error: ..." (CI saw it).
    const std::string line =
        "rank " + std::to_string(mpi->world_rank()) + ": error: " + e.what() + "\n";
    std::cerr.flush();
    [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    mpi->abort(1);
  }
  return 0;
}

}  // namespace pipewright::examples
