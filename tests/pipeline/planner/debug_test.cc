#include <catch2/catch.hpp>
#include <iostream>
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "pipeline/pipe.h"
#include "pipeline/planner/planner.h"
#include "pipeline/planner/stage_probe.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"
using namespace pipewright;
using namespace pipewright::pipeline;
constexpr int64_t kRows = 48, kIn = 24, kHidden = 40, kClasses = 10;
nn::Sequential mlp(uint64_t seed, Device device) {
  Generator g(seed); GeneratorGuard guard(g); const TensorOptions on{.device = device};
  nn::Sequential m; int64_t width = kIn;
  for (int k = 0; k < 2; ++k) { m.push_back(nn::Linear(width, kHidden, true, on)); m.push_back(nn::BatchNorm1d(kHidden, 1e-5, 0.1, true, true, on)); m.push_back(nn::ReLU()); m.push_back(nn::Dropout(0.2)); width = kHidden; }
  m.push_back(nn::Linear(width, kClasses, true, on)); return m;
}
Tensor ce(const Tensor& o, const Tensor& t) { return nn::cross_entropy(o, t); }
TEST_CASE("debug") {
  Device data = Device::cpu(99), dev = Device::cpu(50);
  Generator g(3); Tensor x = Tensor::empty({kRows, kIn}, {.device = data}); g.uniform_(x, -1, 1);
  std::vector<int64_t> labels(kRows); for (int64_t i = 0; i < kRows; ++i) labels[i] = (i * 7) % kClasses;
  Tensor y = Tensor::from_vector(labels, Shape{kRows}, data);
  nn::Sequential model = mlp(1, dev);
  StageMemory m = probe_stage(model, 0, 9, 48, x, y, ce, {.deferred_batch_norm = true});
  std::cout << "F1 " << m.forward_first.peak << " " << m.forward_first.delta << " F " << m.forward.peak << " " << m.forward.delta << "\n";
  std::cout << "B1 " << m.backward_first.peak << " " << m.backward_first.delta << " B " << m.backward.peak << " " << m.backward.delta << " params " << m.parameter_bytes << " targets " << m.target_bytes << "\n";
  Pipe pipe(mlp(1, dev), {.balance = {9}, .devices = {dev}, .chunks = 1, .checkpoint = Checkpoint::kNever, .deferred_batch_norm = true, .schedule = "gpipe"});
  nn::Adam adam(pipe.parameters(), {.lr = 1e-3});
  Allocator& a = allocator_for(dev);
  for (int s = 0; s < 3; ++s) {
    adam.zero_grad();
    int64_t before = a.allocated(); a.reset_peak();
    int step = 0;
    pipe.set_fault_hook_for_testing([&](int, int, const Action& act) { std::cout << "  at " << act.str() << " allocated " << a.allocated() - before << " peak " << a.peak() - before << "\n"; });
    pipe.train_step(x, y, ce);
    std::cout << "step " << s << " before " << before << " peak+ " << a.peak() - before << " after+ " << a.allocated() - before << "\n";
    before = a.allocated(); a.reset_peak();
    adam.step();
    std::cout << "  adam peak+ " << a.peak() - before << " after+ " << a.allocated() - before << "\n";
    (void)step;
  }
}
