// Run under mpirun by failure_test.sh: a planted failure on rank 1 (worker 1, stage 1) in
// the forward of micro-batch 1 of the second step, and what every rank then reports.
//
//   failure_main throw   stage 1 throws std::domain_error("planted failure")
//   failure_main kill    rank 1 SIGKILLs itself (mpirun ends the job)
//   failure_main stall   rank 1 stops answering (sleeps); the others' waits time out
//                        (run with PIPEWRIGHT_MPI_TIMEOUT=3)
//   failure_main no-history  the loss uses Tensor::reshape (no autograd history): the last
//                        stage (rank 1) refuses it in the first step's micro-batch 0
//                        (Note [A loss without history], pipeline/stage_fn.cc)
//   [--replicas D]       D data-parallel replicas of the 2-stage pipeline
//
// Every rank that catches an error prints "rank R caught: <what>" and, after 3 s (so that
// the failure notices reach the others and they print too, even on a loaded machine), ends the job with
// MPI_Abort, as a program should. A run that ends without an error exits 0 (a test failure).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "distributed/mpi.h"
#include "distributed/mpi_processes.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "tensor/generator.h"

namespace {

using namespace pipewright;

// Identity, except on its `fail_at`-th forward (1-based, counted over the run).
class Planted : public nn::Module {
 public:
  Planted(std::string mode, int fail_at) : mode_(std::move(mode)), fail_at_(fail_at) {}
  using nn::Module::forward;
  Tensor forward(const Tensor& x) override {
    if (++calls_ == fail_at_) {
      if (mode_ == "throw") throw std::domain_error("planted failure");
      if (mode_ == "kill") std::raise(SIGKILL);
      if (mode_ == "stall") std::this_thread::sleep_for(std::chrono::seconds(120));
    }
    return x;
  }
  std::string str() const override { return "Planted()"; }

 private:
  std::string mode_;
  int fail_at_;
  int calls_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  distributed::MpiSession mpi(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "throw";
  int replicas = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--replicas") replicas = std::atoi(argv[i + 1]);
  }
  constexpr int kChunks = 4;
  try {
    Generator init(5);
    GeneratorGuard guard(init);
    nn::Sequential model;
    model.push_back(nn::Linear(4, 8));
    // Only replica 0's stage 1 fails; the call count is that of its forwards (kChunks per
    // step): the second step's micro-batch 1.
    const bool planted = mpi.world_rank() == 1;
    model.push_back(Planted(planted ? mode : "none", kChunks + 2));
    model.push_back(nn::Linear(8, 3));
    auto processes = std::make_shared<distributed::MpiProcesses>(MPI_COMM_WORLD, 2, replicas, 2);
    pipeline::Pipe pipe(std::move(model), {.balance = {1, 2},
                                           .devices = {Device::cpu(0), Device::cpu(1)},
                                           .chunks = kChunks,
                                           .schedule = {.name = "1f1b",
                                                        .recompute = pipeline::Checkpoint::kNever},
                                           .threads_per_worker = 1,
                                           .processes = processes});
    const bool no_history = mode == "no-history";
    const pipeline::LossFn loss_fn = [no_history](const Tensor& out, const Tensor& y) {
      return nn::cross_entropy(no_history ? out.reshape({-1, 3}) : out, y);
    };
    for (int step = 0; step < 4; ++step) {
      Tensor x = Tensor::empty({8L * replicas, 4});
      init.normal_(x);
      const Tensor y = Tensor::zeros({8L * replicas}, {.dtype = DType::kInt64});
      pipe.zero_grad();
      distributed::train_step(pipe, x, y, loss_fn);
    }
  } catch (const std::exception& e) {
    // One write per line: the ranks share mpirun's stderr, and a line written in pieces
    // interleaves with the others' (the test counts whole lines).
    const std::string line =
        "rank " + std::to_string(mpi.world_rank()) + " caught: " + e.what() + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::seconds(3));
    mpi.abort(3);
  }
  if (mpi.world_rank() == 0) std::cout << "no failure happened\n";
  return 0;
}
