#include <catch2/catch.hpp>
#include <thread>

#include "tensor/threads.h"

#ifdef _OPENMP
#include <omp.h>
#endif

using namespace pipewright;

TEST_CASE("intra-op threads default to all cores and are clamped") {
  const int cores = hardware_threads();
  REQUIRE(cores >= 1);
  REQUIRE(intra_op_threads() >= 1);
  REQUIRE(intra_op_threads() <= cores);
  set_intra_op_threads(1);
  REQUIRE(intra_op_threads() == 1);
  set_intra_op_threads(0);
  REQUIRE(intra_op_threads() == 1);
  set_intra_op_threads(cores + 100);
  REQUIRE(intra_op_threads() == cores);
#ifdef _OPENMP
  REQUIRE(omp_get_max_threads() == cores);  // what Eigen and the kernels' OpenMP loops read
#endif
}

TEST_CASE("ThreadBudgetGuard sets and restores the budget") {
  set_intra_op_threads(hardware_threads());
  const int before = intra_op_threads();
  {
    ThreadBudgetGuard guard(1);
    REQUIRE(intra_op_threads() == 1);
    {
      ThreadBudgetGuard inner(hardware_threads());
      REQUIRE(intra_op_threads() == hardware_threads());
    }
    REQUIRE(intra_op_threads() == 1);
  }
  REQUIRE(intra_op_threads() == before);
}

TEST_CASE("the budget is per thread") {
  set_intra_op_threads(hardware_threads());
  int seen_in_worker = 0;
  std::thread worker([&] {
    ThreadBudgetGuard guard(1);
    seen_in_worker = intra_op_threads();
  });
  worker.join();
  REQUIRE(seen_in_worker == 1);
  REQUIRE(intra_op_threads() == hardware_threads());
}
