// main()'s frame for an example that runs in one process or, started by mpirun, in many.
#pragma once

#include <functional>

#include "examples/common/config.h"

namespace pipewright::examples {

/// Runs `body` (apply the flags, train) as an example's main(). Started by mpirun
/// (distributed::launched_by_mpirun), it first opens the MPI session, sets config.distributed
/// and checks that the world has config.workers x config.data_parallel ranks (else an error
/// naming both counts and the mpirun -np to use). Returns 0; for an exception from either, in
/// one process it prints "error: <what>" to stderr and returns 1; across processes it prints
/// "rank R: error: <what>", waits half a second for the failure notice to reach the other
/// ranks (they print the origin too), and ends the whole job (MPI_Abort, exit status 1).
/// Without mpirun MPI is not started at all.
int run_example(int* argc, char*** argv, TrainConfig& config, const std::function<void()>& body);

}  // namespace pipewright::examples
