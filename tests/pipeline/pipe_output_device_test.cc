// A stage whose output lands on a device other than its own (Note [A stage's output on another
// device], pipeline/stage_fn.cc): the output is copied back to the stage's device inside the
// cell, so forward() returns on the last stage's device (pipe.h), values and gradients equal
// the plain model's, and the other device holds nothing after the step. CPU devices here; the
// same on simulated GPUs in tests/cuda/pipe_fault_test.cc.
#include <catch2/catch.hpp>

#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "tensor/allocator.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

namespace {

// small_mlp's layers and two MoveTo; with `away`, stage 0 (children 0-2) ends on cpu:5 and
// stage 1 (children 3-6) on cpu:6, else both MoveTo stay on cpu:0 (identities for the plain
// model, which then has the same parameter names).
nn::Sequential model(uint64_t seed, bool away) {
  Generator g(seed);
  GeneratorGuard guard(g);
  nn::Sequential m;
  m.push_back(nn::Linear(4, 8));
  m.push_back(nn::ReLU());
  m.push_back(MoveTo(Device::cpu(away ? 5 : 0)));
  m.push_back(nn::Linear(8, 8));
  m.push_back(nn::Tanh());
  m.push_back(nn::Linear(8, 3));
  m.push_back(MoveTo(Device::cpu(away ? 6 : 0)));
  return m;
}

Tensor mse(const Tensor& out, const Tensor& t) { return nn::mse_loss(out, t.to(out.device())); }

int64_t allocated_away() {
  return allocator_for(Device::cpu(5)).allocated() + allocator_for(Device::cpu(6)).allocated();
}

}  // namespace

TEST_CASE("a stage's output on another device is copied back to the stage's device") {
  const Checkpoint mode = GENERATE(Checkpoint::kAlways, Checkpoint::kExceptLast,
                                   Checkpoint::kNever);
  const int chunks = GENERATE(1, 4);
  CAPTURE(to_string(mode), chunks);
  nn::Sequential plain = model(7, false);
  Pipe pipe(model(7, true), {.balance = {3, 4}, .devices = {Device::cpu(1), Device::cpu(2)},
                             .chunks = chunks,
                             .schedule = {.recompute = mode}});
  const Tensor x = randn({8, 4}, 1), y = randn({8, 3}, 2);
  const int64_t before = allocated_away();

  // forward() + backward: the output is on the last stage's device, cpu:2, not cpu:6.
  const PlainRun ref = plain_model_run(plain, x, y);
  Tensor xp = x.clone().set_requires_grad(true);
  Tensor out = pipe.forward(xp);
  REQUIRE(out.device() == Device::cpu(2));
  REQUIRE(max_diff(out, ref.out) <= 1e-6);
  Tensor loss = mse(out, y);
  loss.backward();
  REQUIRE(max_diff(xp.grad(), ref.input_grad) <= 1e-6);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= 1e-6);
  for (const Tensor& p : pipe.parameters()) {
    REQUIRE(p.grad().device() == p.device());  // the gradient came back through the copies
  }
  out = Tensor();
  loss = Tensor();
  REQUIRE(allocated_away() == before);  // nothing left on cpu:5 or cpu:6

  // train_step under two schedules: the same losses and gradients.
  for (const char* schedule : {"gpipe", "1f1b"}) {
    CAPTURE(schedule);
    plain.zero_grad();
    pipe.zero_grad();
    Tensor ref_loss = nn::mse_loss(plain.forward(x), y);
    ref_loss.backward();
    const StepResult r = pipe.train_step(x, y, mse,
                                         {.schedule = named_schedule(pipe, x, schedule)});
    REQUIRE(std::abs(r.loss - ref_loss.item()) <= 1e-6);
    REQUIRE(max_grad_diff(pipe.module(), plain) <= 1e-6);
    REQUIRE(allocated_away() == before);
  }
}
