// Run under mpirun (tests/distributed/run_mpi.sh): Pipe::clip_grad_norm across processes
// equals nn::clip_grad_norm on the un-pipelined model, for GPipe, 1F1B and ZB-V, with and
// without data-parallel replicas. Each rank computes the reference itself (same seed, the
// whole batch, one process) and compares the norm (every rank gets the whole pipeline's)
// and the clipped gradients of the stages it owns. Loss scaling: a step scaled by
// StepOptions::loss_scale and unscaled by Pipe::unscale_grads gives the reference's
// gradients, and an overflow in stage 0's gradients alone is found by every rank.
//
//   mpirun -np 2 clip_grad_main 1      (2 workers, 1 replica)
//   mpirun -np 4 clip_grad_main 2      (2 workers x 2 replicas)
//
// Exit status 0 when every comparison on every rank passed.
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "distributed/mpi.h"
#include "distributed/mpi_processes.h"
#include "nn/clip_grad.h"
#include "nn/grad_scaler.h"
#include "nn/loss.h"
#include "nn/optim_adam.h"
#include "nn/transformer.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule/generators.h"
#include "tensor/generator.h"

namespace {

using namespace pipewright;

int failures = 0;
int rank = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::cerr << "rank " << rank << ": FAILED " << what << "\n";
  }
}

// max |a - b| / max(1, max |b|).
double rel_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double diff = 0, scale = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return diff / scale;
}

// Four TransformerBlocks (dim 16, 2 heads), identical for the same seed.
nn::Sequential model() {
  Generator g(11);
  GeneratorGuard guard(g);
  nn::Sequential m;
  for (int i = 0; i < 4; ++i) m.push_back(nn::TransformerBlock(16, 2));
  return m;
}

void run(const std::string& schedule, int virtual_stages, int workers, int replicas,
         double norm_type) {
  const std::string where = schedule + " (" + std::to_string(workers) + " workers x " +
                            std::to_string(replicas) + " replicas, norm " +
                            std::to_string(norm_type) + ")";
  const int stages = workers * virtual_stages;
  std::vector<int> balance(static_cast<size_t>(stages), 4 / stages);
  std::vector<Device> devices;
  for (int w = 0; w < workers; ++w) devices.push_back(Device::cpu(w));
  auto processes = std::make_shared<distributed::MpiProcesses>(MPI_COMM_WORLD, workers, replicas,
                                                               stages);
  pipeline::Pipe pipe(model(), {.balance = balance,
                                .devices = devices,
                                .chunks = 2,
                                .schedule = {.name = schedule, .virtual_stages = virtual_stages},
                                .threads_per_worker = 1,
                                .processes = processes});
  nn::Sequential plain = model();

  const int64_t n = 4 * replicas;
  Tensor x = Tensor::empty({n, 5, 16}), y = Tensor::empty({n, 5, 16});
  Generator(21).normal_(x);
  Generator(22).normal_(y);
  const pipeline::LossFn loss_fn = [](const Tensor& out, const Tensor& t) {
    return nn::mse_loss(out, t);
  };
  nn::mse_loss(plain.forward(x), y).backward();
  distributed::train_step(pipe, x, y, loss_fn);

  const double max_norm = 0.01;  // below either norm: every gradient is scaled
  const double want = nn::clip_grad_norm(plain.parameters(), max_norm, norm_type);
  const double got = pipe.clip_grad_norm(max_norm, norm_type);
  expect(want > 10 * max_norm, where + ": the norm " + std::to_string(want) + " must be clipped");
  expect(std::abs(got - want) <= 1e-5 * want,
         where + ": norm " + std::to_string(got) + ", want " + std::to_string(want));

  const std::vector<int> placement =
      pipeline::schedule_placement(schedule, workers, virtual_stages);
  const std::vector<nn::Sequential> reference = [&] {
    std::vector<nn::Sequential> parts;
    size_t begin = 0;
    for (int b : balance) {
      parts.push_back(plain.slice(begin, begin + static_cast<size_t>(b)));
      begin += static_cast<size_t>(b);
    }
    return parts;
  }();
  for (int s = 0; s < stages; ++s) {
    if (!processes->runs_worker(placement[static_cast<size_t>(s)])) continue;
    const nn::Tensors p = pipe.partitions()[static_cast<size_t>(s)].parameters();
    const nn::Tensors q = reference[static_cast<size_t>(s)].parameters();
    for (size_t i = 0; i < p.size(); ++i) {
      expect(p[i].grad().defined() && rel_diff(p[i].grad(), q[i].grad()) <= 1e-5,
             where + ": stage " + std::to_string(s) + " clipped gradient " + std::to_string(i));
    }
  }
}

void run_loss_scaling(int workers, int replicas) {
  const std::string where = "loss scaling (" + std::to_string(workers) + " workers x " +
                            std::to_string(replicas) + " replicas)";
  std::vector<Device> devices;
  for (int w = 0; w < workers; ++w) devices.push_back(Device::cpu(w));
  auto processes = std::make_shared<distributed::MpiProcesses>(MPI_COMM_WORLD, workers, replicas,
                                                               workers);
  pipeline::Pipe pipe(model(), {.balance = std::vector<int>(static_cast<size_t>(workers),
                                                            4 / workers),
                                .devices = devices,
                                .chunks = 2,
                                .schedule = {.name = "1f1b"},
                                .threads_per_worker = 1,
                                .processes = processes});
  nn::Sequential plain = model();
  const int64_t n = 4 * replicas;
  Tensor x = Tensor::empty({n, 5, 16}), y = Tensor::empty({n, 5, 16});
  Generator(23).normal_(x);
  Generator(24).normal_(y);
  const pipeline::LossFn loss_fn = [](const Tensor& out, const Tensor& t) {
    return nn::mse_loss(out, t);
  };
  nn::mse_loss(plain.forward(x), y).backward();
  nn::GradScaler scaler({.init_scale = 1024.0});
  distributed::train_step(pipe, x, y, loss_fn, {.loss_scale = scaler.scale()});
  expect(!pipe.unscale_grads(scaler), where + ": found an overflow in a clean step");
  const int stage = processes->worker();  // one stage per worker, stage s on worker s
  const nn::Tensors p = pipe.partitions()[static_cast<size_t>(stage)].parameters();
  const nn::Tensors q = plain.slice(static_cast<size_t>(stage) * (4 / workers),
                                    static_cast<size_t>(stage + 1) * (4 / workers))
                            .parameters();
  for (size_t i = 0; i < p.size(); ++i) {
    expect(p[i].grad().defined() && rel_diff(p[i].grad(), q[i].grad()) <= 1e-5,
           where + ": stage " + std::to_string(stage) + " unscaled gradient " +
               std::to_string(i));
  }
  scaler.update();

  pipe.zero_grad();
  distributed::train_step(pipe, x, y, loss_fn, {.loss_scale = scaler.scale()});
  if (stage == 0) {  // every replica's stage 0, as an all-reduced overflow would be
    Tensor w = p.at(0);
    std::vector<float> g = w.grad().to_vector<float>();
    g[0] = INFINITY;
    w.set_grad(Tensor::from_vector(g, w.shape()));
  }
  expect(pipe.unscale_grads(scaler), where + ": stage 0's overflow not found on this rank");
}

// The whole step with StepOptions::grad_scaler across processes (one replica: the batch is
// the pipeline's own): under float16 a scale of 2^40 overflows, so every rank skips (its
// stages keep their parameters and Adam stays without state) and backs off to 2^16, whose
// step is clean on every rank. The finding is combined over the pipeline's processes.
void run_whole_step_loss_scaling(int workers) {
  const std::string where = "whole step with grad_scaler (" + std::to_string(workers) +
                            " workers)";
  std::vector<Device> devices;
  for (int w = 0; w < workers; ++w) devices.push_back(Device::cpu(w));
  auto processes =
      std::make_shared<distributed::MpiProcesses>(MPI_COMM_WORLD, workers, 1, workers);
  pipeline::Pipe pipe(model(), {.balance = std::vector<int>(static_cast<size_t>(workers),
                                                            4 / workers),
                                .devices = devices,
                                .chunks = 2,
                                .schedule = {.name = "1f1b"},
                                .precision = autograd::Precision::kFloat16,
                                .threads_per_worker = 1,
                                .processes = processes});
  nn::Adam adam(pipe.parameters(), {.lr = 0.01});
  nn::GradScaler scaler(
      {.init_scale = std::ldexp(1.0, 40), .backoff_factor = std::ldexp(1.0, -24)});
  Tensor x = Tensor::empty({4, 5, 16}), y = Tensor::empty({4, 5, 16});
  Generator(25).normal_(x);
  Generator(26).normal_(y);
  const pipeline::LossFn loss_fn = [](const Tensor& out, const Tensor& t) {
    return nn::mse_loss(out, t);
  };
  const nn::Tensors mine = pipe.partitions()[static_cast<size_t>(processes->worker())]
                               .parameters();
  std::vector<Tensor> before;
  for (const Tensor& p : mine) before.push_back(p.clone());
  auto unchanged = [&] {
    for (size_t i = 0; i < mine.size(); ++i) {
      if (rel_diff(mine[i], before[i]) != 0.0) return false;
    }
    return true;
  };
  const nn::NamedTensors state_before = adam.state_dict();
  const pipeline::StepResult skipped =
      pipe.train_step(x, y, loss_fn, adam, {.grad_scaler = &scaler});
  expect(skipped.skipped, where + ": a scale of 2^40 did not skip the step on this rank");
  expect(unchanged(), where + ": a skipped step changed this rank's parameters");
  const nn::NamedTensors state_after = adam.state_dict();
  bool same_state = state_after.size() == state_before.size();
  for (size_t i = 0; same_state && i < state_after.size(); ++i) {
    same_state = state_after[i].first == state_before[i].first &&
                 rel_diff(state_after[i].second, state_before[i].second) == 0.0;
  }
  expect(same_state, where + ": a skipped step changed Adam's state");
  expect(scaler.scale() == 65536.0, where + ": the scale did not back off to 2^16");
  const pipeline::StepResult clean =
      pipe.train_step(x, y, loss_fn, adam, {.grad_scaler = &scaler});
  expect(!clean.skipped, where + ": a scale of 2^16 skipped the step on this rank");
  expect(!unchanged(), where + ": a clean step left this rank's parameters as they were");
}

}  // namespace

int main(int argc, char** argv) {
  distributed::MpiSession mpi(&argc, &argv);
  rank = mpi.world_rank();
  const int replicas = argc > 1 ? std::atoi(argv[1]) : 1;
  const int workers = mpi.world_size() / replicas;
  for (double norm_type : {2.0, double(INFINITY)}) {
    run("gpipe", 1, workers, replicas, norm_type);
    run("1f1b", 1, workers, replicas, norm_type);
    run("zb-v", 2, workers, replicas, norm_type);
  }
  run_loss_scaling(workers, replicas);
  if (replicas == 1) run_whole_step_loss_scaling(workers);
  if (failures == 0) std::cout << "rank " << rank << ": all clip_grad_norm comparisons passed\n";
  return failures == 0 ? 0 : 1;
}
