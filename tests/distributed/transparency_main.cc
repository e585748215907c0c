// Run under mpirun (tests/distributed/run_mpi.sh): every schedule and checkpoint mode across
// processes, with and without data parallelism, equals the single-process Pipe on the same
// global batch. Each rank computes the in-process reference itself (same seed, same model)
// and compares what it owns: the loss, the gradients and updated weights of its stages, and
// (one replica) their deferred BatchNorm statistics; then, with one replica, eval_step's loss.
//
//   mpirun -np 2 transparency_main --replicas 1      (2 workers)
//   mpirun -np 4 transparency_main --replicas 2      (2 workers x 2 replicas)
//   mpirun -np 4 transparency_main --replicas 1      (4 workers)
//   mpirun -np 2 transparency_cuda_main --cuda       (cuda:0, cuda:1; --config=cudasim)
//
// Exit status 0 when every comparison on every rank passed; each failure is printed with
// its rank, configuration and the values.
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "distributed/mpi.h"
#include "distributed/mpi_processes.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule/generators.h"
#include "tensor/generator.h"
#include "tests/pipeline/pipe_test_util.h"

namespace {

using namespace pipewright;
using pipeline::Checkpoint;

int failures = 0;
int rank = 0;
bool on_cuda = false;  // --cuda: worker w on cuda:w (under --config=cudasim: simulated GPUs)

void expect_close(double got, double want, double tol, const std::string& what) {
  const double err = std::abs(got - want) / std::max(1.0, std::abs(want));
  if (!(err <= tol)) {
    ++failures;
    std::cerr << "rank " << rank << ": FAILED " << what << ": got " << got << ", want " << want
              << " (relative error " << err << " > " << tol << ")\n";
  }
}

// max |a - b| / max(1, max |b|).
double rel_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  if (x.size() != y.size()) return INFINITY;
  double diff = 0, scale = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return diff / scale;
}

// Linear BN ReLU Linear Tanh Linear ReLU Linear: eight children, from `seed`. With `skips`,
// Linear [Stash s] BN ReLU Linear Tanh [Pop s] Linear ReLU Linear: ten children, the skip
// crossing stages (a portal between processes) under every cut used here.
nn::Sequential model(uint64_t seed, bool skips = false) {
  Generator g(seed);
  GeneratorGuard guard(g);
  nn::Sequential m;
  m.push_back(nn::Linear(6, 16));
  if (skips) m.push_back(pipeline::testing::Stash("s", /*tanh=*/true));
  m.push_back(nn::BatchNorm1d(16));
  m.push_back(nn::ReLU());
  m.push_back(nn::Linear(16, 16));
  m.push_back(nn::Tanh());
  if (skips) m.push_back(pipeline::testing::Pop("s", /*mul=*/true));
  m.push_back(nn::Linear(16, 16));
  m.push_back(nn::ReLU());
  m.push_back(nn::Linear(16, 4));
  return m;
}

struct Config {
  std::string schedule;
  int virtual_stages;
  Checkpoint checkpoint;
  bool deferred_batch_norm;
  bool skips = false;
  std::string str() const {
    std::ostringstream s;
    s << schedule << " v=" << virtual_stages << " checkpoint=" << pipeline::to_string(checkpoint)
      << " deferred_bn=" << deferred_batch_norm << " skips=" << skips;
    return s.str();
  }
};

pipeline::PipeOptions options(const Config& c, int workers, int chunks,
                              std::shared_ptr<pipeline::Processes> processes) {
  const int stages = workers * c.virtual_stages;
  std::vector<int> balance;
  // The children over the stages, the remainder to the first ones.
  const int n = c.skips ? 10 : 8;
  for (int s = 0; s < stages; ++s) balance.push_back(n / stages + (s < n % stages ? 1 : 0));
  std::vector<Device> devices;
  for (int w = 0; w < workers; ++w) devices.push_back(on_cuda ? Device::cuda(w) : Device::cpu(w));
  return {.balance = balance,
          .devices = devices,
          .chunks = chunks,
          .schedule = {.name = c.schedule, .virtual_stages = c.virtual_stages,
                       .recompute = c.checkpoint},
          .deferred_batch_norm = c.deferred_batch_norm,
          .seed = 7,
          .threads_per_worker = 1,
          .processes = std::move(processes)};
}

void run(const Config& c, int workers, int replicas) {
  constexpr int kChunks = 4, kRowsPerReplica = 12, kSteps = 2;
  const int64_t n = kRowsPerReplica * replicas;
  const std::string where = c.str() + " (" + std::to_string(workers) + " workers x " +
                            std::to_string(replicas) + " replicas)";
  // The reference: one process, the global batch, as many micro-batches as all replicas
  // together (so each micro-batch holds the same rows as one replica's: BatchNorm sees the
  // same statistics).
  pipeline::Pipe reference(model(3, c.skips), options(c, workers, kChunks * replicas, nullptr));
  auto processes = std::make_shared<distributed::MpiProcesses>(MPI_COMM_WORLD, workers, replicas,
                                                               workers * c.virtual_stages);
  pipeline::Pipe pipe(model(3, c.skips), options(c, workers, kChunks, processes));
  const std::vector<int> placement =
      pipeline::schedule_placement(c.schedule, workers, c.virtual_stages);

  const auto& ref_parts = reference.partitions();
  const auto& parts = pipe.partitions();
  // Every local stage's parameter gradients against the reference's.
  auto compare_gradients = [&](const std::string& at) {
    for (size_t s = 0; s < parts.size(); ++s) {
      if (!processes->runs_worker(placement[s])) continue;
      const nn::Tensors p = parts[s].parameters(), q = ref_parts[s].parameters();
      for (size_t i = 0; i < p.size(); ++i) {
        if (!p[i].grad().defined()) {
          ++failures;
          std::cerr << "rank " << rank << ": FAILED " << at << ": stage " << s << " parameter " << i
                    << " has no gradient\n";
          continue;
        }
        expect_close(rel_diff(p[i].grad(), q[i].grad()), 0, 1e-5,
                     at + ": stage " + std::to_string(s) + " gradient " + std::to_string(i));
      }
    }
  };

  nn::SGD ref_opt(reference.parameters(), {.lr = 0.1});
  nn::SGD opt(pipe.parameters(), {.lr = 0.1});
  const pipeline::LossFn loss_fn = [](const Tensor& out, const Tensor& y) {
    return nn::cross_entropy(out, y);
  };
  for (int step = 0; step < kSteps; ++step) {
    Tensor x = Tensor::empty({n, 6});
    Generator data(100 + static_cast<uint64_t>(step));
    data.normal_(x);
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < n; ++i) labels.push_back((i * 7 + step) % 4);
    const Tensor y = Tensor::from_vector(labels);

    reference.zero_grad();
    pipe.zero_grad();
    const pipeline::StepResult want = reference.train_step(x, y, loss_fn);
    const pipeline::StepResult got = distributed::train_step(pipe, x, y, loss_fn);
    const std::string at = where + " step " + std::to_string(step);
    expect_close(got.loss, want.loss, 1e-5, at + ": loss");

    compare_gradients(at);
    ref_opt.step();
    opt.step();
    for (size_t s = 0; s < parts.size(); ++s) {
      if (!processes->runs_worker(placement[s])) continue;
      const nn::NamedTensors p = parts[s].state_dict(), q = ref_parts[s].state_dict();
      for (size_t i = 0; i < p.size(); ++i) {
        const bool buffer = p[i].first.find("running") != std::string::npos ||
                            p[i].first.find("num_batches") != std::string::npos;
        if (buffer && replicas > 1) continue;  // per replica (Note [Data-parallel gradients])
        expect_close(rel_diff(p[i].second, q[i].second), 0, 1e-5,
                     at + ": stage " + std::to_string(s) + " " + p[i].first + " after the step");
      }
    }
  }

  // The general form across processes (each replica's share cut by the input's ChunkSpec),
  // with a summed loss: gradients weighted 1, not n_r / N, equal the reference's.
  {
    Tensor x = Tensor::empty({n, 6});
    Generator(300).normal_(x);
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < n; ++i) labels.push_back((i * 3) % 4);
    const Tensor y = Tensor::from_vector(labels);
    const pipeline::TupleLossFn sum_loss = [](const nn::Tensors& out, const nn::Tensors& t) {
      return nn::cross_entropy(out.at(0), t.at(0), autograd::Reduction::kSum);
    };
    const pipeline::StepOptions o = {.reduction = pipeline::LossReduction::kSum};
    reference.zero_grad();
    pipe.zero_grad();
    const pipeline::StepResult want = reference.train_step({x}, {y}, sum_loss, o);
    const pipeline::StepResult got =
        distributed::train_step(pipe, nn::Tensors{x}, nn::Tensors{y}, sum_loss, o);
    expect_close(got.loss, want.loss, 1e-5, where + ": summed loss");
    compare_gradients(where + ": summed loss");
  }

  // eval_step across processes: forward and loss only, the loss known on every rank. (With
  // replicas, BatchNorm's running statistics are per replica: no single-process reference.)
  if (replicas > 1) return;
  Tensor x = Tensor::empty({n, 6});
  Generator(200).normal_(x);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(i % 4);
  const Tensor y = Tensor::from_vector(labels);
  reference.eval();
  pipe.eval();
  pipe.zero_grad();
  const pipeline::StepResult want = reference.eval_step(x, y, loss_fn);
  const pipeline::StepResult got = pipe.eval_step(x, y, loss_fn);
  expect_close(got.loss, want.loss, 1e-5, where + ": eval_step loss");
  for (const Tensor& p : pipe.parameters()) {
    if (p.grad().defined()) {
      ++failures;
      std::cerr << "rank " << rank << ": FAILED " << where << ": eval_step made a gradient\n";
      break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  distributed::MpiSession mpi(&argc, &argv);
  rank = mpi.world_rank();
  int replicas = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--replicas") replicas = std::atoi(argv[i + 1]);
  }
  for (int i = 1; i < argc; ++i) on_cuda = on_cuda || std::string(argv[i]) == "--cuda";
  const int workers = mpi.world_size() / replicas;
  const std::vector<Config> configs = {
      {"gpipe", 1, Checkpoint::kNever, false},
      {"gpipe", 1, Checkpoint::kExceptLast, true},
      {"gpipe", 1, Checkpoint::kAlways, false},
      {"1f1b", 1, Checkpoint::kNever, true},
      {"1f1b", 1, Checkpoint::kExceptLast, false},
      {"1f1b", 1, Checkpoint::kAlways, true},
      {"interleaved-1f1b", 2, Checkpoint::kNever, false},
      {"interleaved-1f1b", 2, Checkpoint::kExceptLast, true},
      {"zb-h1", 1, Checkpoint::kNever, false},
      {"zb-h1", 1, Checkpoint::kExceptLast, true},
      {"zb-h2", 1, Checkpoint::kNever, true},
      {"zb-h2", 1, Checkpoint::kAlways, false},
      {"zb-v", 2, Checkpoint::kNever, false},
      {"zb-v", 2, Checkpoint::kExceptLast, true},
      {"interleaved-zb", 2, Checkpoint::kExceptLast, false},
      {"1f1b", 1, Checkpoint::kExceptLast, false, /*skips=*/true},
      {"zb-v", 2, Checkpoint::kAlways, false, /*skips=*/true},
  };
  try {
    for (const Config& c : configs) run(c, workers, replicas);
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": error: " << e.what() << "\n";
    mpi.abort(2);
  }
  int total = 0;
  distributed::check(MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
                     "MPI_Allreduce");
  if (rank == 0) {
    std::cout << configs.size() << " configurations on " << workers << " workers x " << replicas
              << " replicas" << (on_cuda ? " (CUDA)" : "") << ": "
              << (total == 0 ? "all equal the single process"
                             : std::to_string(total) + " comparisons FAILED")
              << "\n";
  }
  return total == 0 ? 0 : 1;
}
