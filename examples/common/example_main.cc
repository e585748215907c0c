#include "examples/common/example_main.h"

#include <chrono>
#include <exception>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "distributed/mpi.h"

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
    body();
  } catch (const std::exception& e) {
    if (mpi == nullptr) {
      std::cerr << "error: " << e.what() << "\n";
      return 1;
    }
    std::cerr << "rank " << mpi->world_rank() << ": error: " << e.what() << "\n" << std::flush;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    mpi->abort(1);
  }
  return 0;
}

}  // namespace pipewright::examples
