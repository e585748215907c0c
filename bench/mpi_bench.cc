// Pipeline stages as processes, measured (docs/BENCHMARKS.md, "Processes (distributed/)").
//
//   tools/bazel build //bench:mpi_bench && tools/launch -np 2 bazel-bin/bench/mpi_bench
//
// Needs exactly 2 ranks. Prints, from rank 0, medians over repetitions of:
//   1. one training step of the main job's model (784-512-512-10 MLP with BatchNorm and
//      Dropout, batch 256, 4 micro-batches, GPipe, Adam) with 2 stages as 2 worker threads of
//      one process (rank 1 waits meanwhile) against the same step with 2 stages as 2 ranks;
//   2. the same step on one stage, data-parallel over 2 ranks (128 rows each) against one
//      process with one stage on the whole batch;
//   3. bytes/s of MpiTransport (pack, communication thread, unpack) for activation-sized
//      messages (64 x 512 float32 = 128 KiB, and a range of sizes) against a raw
//      MPI_Send/MPI_Recv ping-pong of the same sizes: one-way bytes / (round trip / 2).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/mpi.h"
#include "distributed/mpi_processes.h"
#include "distributed/mpi_transport.h"
#include "examples/fashion_mnist/trainer.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "pipeline/pipe.h"
#include "tensor/generator.h"

namespace {

using namespace pipewright;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds of `step` over `reps` runs after `warmup` runs.
double time_ms(int warmup, int reps, const std::function<void()>& step) {
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return median(ms);
}

struct Batch {
  Tensor x, y;
};

Batch make_batch(int64_t n) {
  Tensor x = Tensor::empty({n, 784});
  Generator g(1);
  g.normal_(x);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(i % 10);
  return {x, Tensor::from_vector(labels)};
}

const pipeline::LossFn kLoss = [](const Tensor& out, const Tensor& y) {
  return nn::cross_entropy(out, y);
};

pipeline::PipeOptions step_options(int stages, std::shared_ptr<pipeline::Processes> processes) {
  std::vector<Device> devices;
  for (int s = 0; s < stages; ++s) devices.push_back(Device::cpu(s));
  return {.balance = stages == 2 ? std::vector<int>{1, 8} : std::vector<int>{9},
          .devices = devices,
          .chunks = 4,
          .schedule = {.name = "gpipe", .recompute = pipeline::Checkpoint::kNever},
          .deferred_batch_norm = true,
          .seed = 0,
          .processes = std::move(processes)};
}

}  // namespace

int main(int argc, char** argv) {
  distributed::MpiSession mpi(&argc, &argv);
  if (mpi.world_size() != 2) {
    std::fprintf(stderr, "mpi_bench needs 2 ranks (tools/launch -np 2 ...), got %d\n",
                 mpi.world_size());
    return 1;
  }
  const bool root = mpi.world_rank() == 0;
  constexpr int kWarmup = 5, kReps = 40;
  const Batch batch = make_batch(256);

  // 1. 2 stages: threads of one process vs ranks.
  auto barrier = std::make_shared<distributed::MpiProcesses>(MPI_COMM_WORLD, 2, 1, 2);
  double threads_ms = 0;
  if (root) {
    pipeline::Pipe pipe(examples::build_model({512, 512}, 0.2, 0), step_options(2, nullptr));
    nn::Adam opt(pipe.parameters(), {.lr = 1e-3});
    threads_ms = time_ms(kWarmup, kReps, [&] {
      opt.zero_grad();
      pipe.train_step(batch.x, batch.y, kLoss);
      opt.step();
    });
  }
  barrier->barrier();
  double ranks_ms = 0;
  {
    auto processes = std::make_shared<distributed::MpiProcesses>(MPI_COMM_WORLD, 2, 1, 2);
    pipeline::Pipe pipe(examples::build_model({512, 512}, 0.2, 0), step_options(2, processes));
    nn::Adam opt(pipe.parameters(), {.lr = 1e-3});
    ranks_ms = time_ms(kWarmup, kReps, [&] {
      opt.zero_grad();
      distributed::train_step(pipe, batch.x, batch.y, kLoss);
      opt.step();
    });
  }
  barrier->barrier();

  // 2. data parallel: one stage, 2 replicas vs one process.
  double one_ms = 0;
  if (root) {
    pipeline::Pipe pipe(examples::build_model({512, 512}, 0.2, 0), step_options(1, nullptr));
    nn::Adam opt(pipe.parameters(), {.lr = 1e-3});
    one_ms = time_ms(kWarmup, kReps, [&] {
      opt.zero_grad();
      pipe.train_step(batch.x, batch.y, kLoss);
      opt.step();
    });
  }
  barrier->barrier();
  double dp_ms = 0;
  {
    auto processes = std::make_shared<distributed::MpiProcesses>(MPI_COMM_WORLD, 1, 2, 1);
    pipeline::Pipe pipe(examples::build_model({512, 512}, 0.2, 0), step_options(1, processes));
    nn::Adam opt(pipe.parameters(), {.lr = 1e-3});
    dp_ms = time_ms(kWarmup, kReps, [&] {
      opt.zero_grad();
      distributed::train_step(pipe, batch.x, batch.y, kLoss);
      opt.step();
    });
  }
  barrier->barrier();
  if (root) {
    std::printf("train step, main job's model, batch 256, 4 micro-batches, GPipe (median of %d)\n",
                kReps);
    std::printf("  2 stages, 2 worker threads in 1 process   %8.2f ms\n", threads_ms);
    std::printf("  2 stages, 2 processes (MpiTransport)      %8.2f ms\n", ranks_ms);
    std::printf("  1 stage, 1 process                        %8.2f ms\n", one_ms);
    std::printf("  1 stage x 2 data-parallel processes       %8.2f ms\n", dp_ms);
  }

  // 3. transport vs raw MPI ping-pong.
  if (root) {
    std::printf("\none-way bandwidth, ping-pong between 2 ranks (median of round trips)\n");
    std::printf("  %10s  %14s  %14s  %6s\n", "bytes", "MpiTransport", "raw MPI", "ratio");
  }
  auto link = std::make_shared<distributed::MpiLink>(MPI_COMM_WORLD, MPI_COMM_WORLD,
                                                     "rank " + std::to_string(mpi.world_rank()));
  int64_t step_id = 0;
  for (int64_t floats : {1024L, 16384L, 32768L, 262144L, 1048576L}) {
    const int64_t rows = floats / 512;
    const Tensor payload =
        Tensor::zeros({std::max<int64_t>(rows, 1), floats / std::max<int64_t>(rows, 1)});
    const int reps = floats >= 262144 ? 20 : 200;
    // MpiTransport: activation to stage 1, gradient back to stage 0.
    double transport_ms = time_ms(5, reps, [&] {
      distributed::MpiTransport t(link, ++step_id, {0, 1});
      if (root) {
        t.send({0, 0, pipeline::Direction::kActivation}, {payload}, Device::cpu(1));
        t.recv({0, 0, pipeline::Direction::kGradient});
      } else {
        std::vector<Tensor> got = t.recv({0, 0, pipeline::Direction::kActivation});
        t.send({0, 0, pipeline::Direction::kGradient}, {got[0]}, Device::cpu(0));
      }
    });
    std::vector<char> buffer(payload.nbytes());
    double raw_ms = time_ms(5, reps, [&] {
      const int n = static_cast<int>(buffer.size());
      if (root) {
        MPI_Send(buffer.data(), n, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
        MPI_Recv(buffer.data(), n, MPI_BYTE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buffer.data(), n, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buffer.data(), n, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
      }
    });
    if (root) {
      const double bytes = static_cast<double>(payload.nbytes());
      const double t_bw = bytes / (transport_ms / 2 / 1e3), r_bw = bytes / (raw_ms / 2 / 1e3);
      std::printf("  %10.0f  %9.2f GB/s  %9.2f GB/s  %6.2f   (round trip %.3f ms vs %.3f ms)\n",
                  bytes, t_bw / 1e9, r_bw / 1e9, t_bw / r_bw, transport_ms, raw_ms);
    }
  }
  link.reset();
  barrier->barrier();
  return 0;
}
