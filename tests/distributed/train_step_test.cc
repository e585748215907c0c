// distributed::train_step takes its processes from the Pipe: a Pipe built for one process is
// refused by name (no MPI is started).
#include <catch2/catch.hpp>

#include "distributed/mpi_processes.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "tensor/tensor.h"

using namespace pipewright;

TEST_CASE("distributed::train_step refuses a Pipe without an MpiProcesses, saying what to call") {
  nn::Sequential model;
  model.push_back(nn::Linear(3, 2));
  model.push_back(nn::Linear(2, 2));
  pipeline::Pipe pipe(std::move(model),
                      {.balance = {1, 1}, .devices = {Device::cpu(0), Device::cpu(1)}});
  const Tensor x = Tensor::zeros({4, 3}), y = Tensor::zeros({4, 2});
  const pipeline::LossFn mse = [](const Tensor& out, const Tensor& target) {
    return nn::mse_loss(out, target);
  };
  CHECK_THROWS_WITH(distributed::train_step(pipe, x, y, mse),
                    Catch::Contains("built without an MpiProcesses") &&
                        Catch::Contains("Pipe::train_step"));
}
