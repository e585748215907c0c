// The GPU-versus-CPU tests' bounds held by two correct CPU GEMMs on this machine: the same
// runs (tests/examples/cross_run.h) once with OpenBLAS's GEMM and once with Eigen's
// (tensor/cpu/gemm.h). If a bound were one machine's luck rather than what correct GEMMs do,
// this test would show it on the machine where it fails, without a GPU.
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tensor/cpu/gemm.h"
#include "tests/examples/cross_run.h"

namespace {

using namespace pipewright;

void check_openblas_against_eigen(const examples::TrainConfig& config, const examples::Task& task,
                                  const testing::RunBounds& bounds) {
  std::ostringstream log;
  examples::TrainResult openblas, eigen;
  {
    cpu::GemmBackendGuard guard(cpu::GemmBackend::kOpenBlas);
    openblas = examples::train(config, log, task);
  }
  {
    cpu::GemmBackendGuard guard(cpu::GemmBackend::kEigen);
    eigen = examples::train(config, log, task);
  }
  const testing::RunDistance d = testing::distance(openblas, eigen);
  std::cout << config.optimizer << ": " << d.str() << "\n";
  INFO(d.str());
  CHECK(testing::violations(d, bounds) == std::vector<std::string>{});
  // The two runs did not take the same GEMM: some loss differs in its last bits.
  CHECK(d.worst_step_loss > 0);
}

examples::TrainConfig config(const std::string& optimizer) {
  return testing::cross_run_config({Device::cpu(0), Device::cpu(1)}, "gpipe",
                                   pipeline::Checkpoint::kNever, optimizer);
}

}  // namespace

TEST_CASE("the smooth model's bounds hold between OpenBLAS and Eigen (SGD, Adam)") {
  check_openblas_against_eigen(config("sgd"), testing::smooth_task(),
                               testing::smooth_run_bounds("sgd"));
  check_openblas_against_eigen(config("adam"), testing::smooth_task(),
                               testing::smooth_run_bounds("adam"));
}

TEST_CASE("the example's bounds hold between OpenBLAS and Eigen (SGD, Adam)") {
  check_openblas_against_eigen(config("sgd"), examples::classifier_task(),
                               testing::relu_run_bounds("sgd"));
  check_openblas_against_eigen(config("adam"), examples::classifier_task(),
                               testing::relu_run_bounds("adam"));
}

TEST_CASE("the autoencoder's bounds hold between OpenBLAS and Eigen (SGD)") {
  check_openblas_against_eigen(
      testing::autoencoder_cross_run_config({Device::cpu(0), Device::cpu(1)}, "gpipe",
                                            pipeline::Checkpoint::kNever),
      testing::autoencoder_cross_run_task(), testing::autoencoder_run_bounds());
}
