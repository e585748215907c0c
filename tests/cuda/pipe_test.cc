// Pipe on GPUs (Note [Streams in the pipeline], pipeline/transport.h): each worker computes on
// its own stream and messages cross on copy streams with events. Checked against the plain
// model on the CPU (outputs, losses, input and parameter gradients): two stages on cuda:0,
// two stages on cuda:0 and cuda:1 (peer copies; these need two GPUs: they fail under
// PIPEWRIGHT_REQUIRE_GPU=2, as under cudasim, and otherwise skip loudly), three stages going
// cuda:0 -> cuda:1 -> cuda:0, a host stage feeding a GPU stage, GPipe and 1F1B, with and
// without checkpointing; many steps reusing cached blocks across streams (every step's loss
// and gradients compared), on one GPU and on two; and a stage's exception reaching the caller
// with the Pipe usable afterwards.
//
// Tolerance: float32 GEMMs in cuBLAS (full FP32, TF32 off) and in Eigen sum in different
// orders; at these sizes the results agree to ~1e-6 relative.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tensor/stream.h"
#include "tests/cuda/gpu_test.h"
#include "tests/pipeline/pipe_test_util.h"

namespace pipewright::testing {
namespace {

using pipeline::Checkpoint;
using pipeline::Pipe;
using pipeline::testing::named_schedule;
using pipeline::testing::Pop;
using pipeline::testing::Stash;
using pipeline::testing::ThrowInForward;

constexpr double kTol = 2e-5;

/// Linear(16,64) ReLU Linear(64,64) Tanh Linear(64,8), from `seed` (CPU).
nn::Sequential mlp(uint64_t seed) {
  Generator g(seed);
  GeneratorGuard guard(g);
  return nn::Sequential(nn::Linear(16, 64), nn::ReLU(), nn::Linear(64, 64), nn::Tanh(),
                        nn::Linear(64, 8));
}

Tensor randn(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Generator g(seed);
  g.normal_(t);
  return t;
}

/// max over parameters of |grad_a - grad_b| / max(1, |grad_b|_max), on the host.
double max_grad_diff(const nn::Module& a, const nn::Module& b) {
  const nn::NamedTensors pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const Tensor ga = pa[i].second.grad(), gb = pb[i].second.grad();
    REQUIRE(ga.defined());
    REQUIRE(gb.defined());
    double scale = 1.0;
    for (double v : gb.to_vector<double>()) scale = std::max(scale, std::abs(v));
    worst = std::max(worst, ops::max_abs_diff(ga, gb) / scale);
  }
  return worst;
}

/// Runs the plain model on the CPU and the Pipe on `devices`, forward + loss.backward()
/// (GPipe) and then train_step under "1f1b"; checks outputs, losses and every gradient.
void check_transparent(const std::vector<Device>& devices, int chunks, Checkpoint mode,
                       std::vector<int> balance = {3, 2}) {
  nn::Sequential plain = mlp(3);
  Pipe pipe(mlp(3), {.balance = std::move(balance),
                     .devices = devices,
                     .chunks = chunks,
                     .schedule = {.recompute = mode}});
  const Tensor x0 = randn({32, 16}, 4), target = randn({32, 8}, 5);

  Tensor x = x0.clone().set_requires_grad(true);
  const Tensor ref_out = plain.forward(x);
  Tensor ref_loss = nn::mse_loss(ref_out, target);
  ref_loss.backward();

  Tensor xp = x0.clone().to(devices[0]).set_requires_grad(true);
  Tensor out = pipe.forward(xp);
  REQUIRE(out.device() == devices.back());
  Tensor loss = nn::mse_loss(out, target.to(out.device()));
  loss.backward();
  CHECK(ops::max_abs_diff(out, ref_out) <= kTol);
  CHECK(std::abs(loss.item() - ref_loss.item()) <= kTol);
  CHECK(ops::max_abs_diff(xp.grad(), x.grad()) <= kTol);
  CHECK(max_grad_diff(pipe.module(), plain) <= kTol);

  plain.zero_grad();
  pipe.zero_grad();
  nn::mse_loss(plain.forward(x0), target).backward();
  auto mse = [](const Tensor& o, const Tensor& t) { return nn::mse_loss(o, t); };
  const pipeline::StepResult r = pipe.train_step(x0, target, mse,
                                                 {.schedule = named_schedule(pipe, x0, "1f1b")});
  CHECK(std::abs(r.loss - ref_loss.item()) <= kTol);
  CHECK(max_grad_diff(pipe.module(), plain) <= kTol);
}

TEST_CASE("two stages on one GPU equal the plain model", "[cuda][pipe]") {
  if (!gpu_available_or_skip()) return;
  const int chunks = GENERATE(1, 4, 8);
  const Checkpoint mode = GENERATE(Checkpoint::kNever, Checkpoint::kExceptLast);
  CAPTURE(chunks, pipeline::to_string(mode));
  check_transparent({Device::cuda(0), Device::cuda(0)}, chunks, mode);
}

TEST_CASE("two stages on two GPUs (peer copies) equal the plain model", "[cuda][pipe]") {
  if (!gpus_available_or_skip(2)) return;
  const int chunks = GENERATE(1, 4, 8);
  const Checkpoint mode = GENERATE(Checkpoint::kNever, Checkpoint::kExceptLast);
  CAPTURE(chunks, pipeline::to_string(mode));
  check_transparent({Device::cuda(0), Device::cuda(1)}, chunks, mode);
}

TEST_CASE("three stages cuda:0 -> cuda:1 -> cuda:0 equal the plain model", "[cuda][pipe]") {
  if (!gpus_available_or_skip(2)) return;
  const Checkpoint mode = GENERATE(Checkpoint::kNever, Checkpoint::kAlways);
  CAPTURE(pipeline::to_string(mode));
  check_transparent({Device::cuda(0), Device::cuda(1), Device::cuda(0)}, 4, mode, {2, 2, 1});
}

TEST_CASE("device_timeline: the trace on the GPU's clock, in its streams' order; the step's "
          "results unchanged", "[cuda][pipe]") {
  if (!gpu_available_or_skip()) return;
  // Note [Device timelines] (pipeline/runtime_timeline.cc), on real events. Both workers on
  // cuda:0 share one reference, so the order the device ran things in is exact: each worker's
  // actions one after another (one stream), a stage's F of micro-batch j after the previous
  // stage's F of j ended (its stream waits for the message), a B after the next stage's B.
  const std::string schedule = GENERATE("gpipe", "1f1b");
  CAPTURE(schedule);
  const pipeline::PipeOptions options{.balance = {3, 2},
                                      .devices = {Device::cuda(0), Device::cuda(0)},
                                      .chunks = 4,
                                      .schedule = {.name = schedule,
                                                   .recompute = Checkpoint::kNever}};
  Pipe host(mlp(3), options), timed(mlp(3), options);
  const Tensor x = randn({32, 16}, 4), target = randn({32, 8}, 5);
  auto mse = [](const Tensor& o, const Tensor& t) { return nn::mse_loss(o, t); };
  const pipeline::StepResult a = host.train_step(x, target, mse);
  const pipeline::StepResult b = timed.train_step(x, target, mse, {.device_timeline = true});
  CHECK(b.loss == a.loss);
  CHECK(max_grad_diff(timed.module(), host.module()) == 0.0);
  const std::vector<pipeline::TraceEvent>& events = b.trace.events();
  REQUIRE(events.size() == 16);  // F and B of 4 micro-batches on 2 stages
  const double slack_us = 1.0;  // cudaEventElapsedTime's resolution is about 0.5 µs
  auto find = [&](int stage, pipeline::ActionKind kind, int j) {
    for (const pipeline::TraceEvent& e : events) {
      if (e.stage == stage && e.kind == kind && e.microbatch == j) return e;
    }
    FAIL("no event for stage " << stage << " micro-batch " << j);
    return pipeline::TraceEvent{};
  };
  for (size_t i = 0; i < events.size(); ++i) {
    CAPTURE(i);
    CHECK(events[i].start_us <= events[i].end_us + slack_us);
    if (i > 0 && events[i].worker == events[i - 1].worker) {
      CHECK(events[i - 1].end_us <= events[i].start_us + slack_us);
    }
  }
  for (int j = 0; j < 4; ++j) {
    CAPTURE(j);
    CHECK(find(0, pipeline::ActionKind::kForward, j).end_us <=
          find(1, pipeline::ActionKind::kForward, j).start_us + slack_us);
    CHECK(find(1, pipeline::ActionKind::kBackward, j).end_us <=
          find(0, pipeline::ActionKind::kBackward, j).start_us + slack_us);
  }
}

TEST_CASE("a bf16 step on GPUs is the CPU's bf16 step (cuBLAS GemmEx against widened sgemm)",
          "[cuda][pipe][precision]") {
  if (!gpu_available_or_skip()) return;
  const Tensor x = randn({32, 16}, 6), target = randn({32, 8}, 7);
  auto mse = [](const Tensor& o, const Tensor& t) { return nn::mse_loss(o, t); };
  auto run = [&](std::vector<Device> devices, autograd::Precision precision) {
    Pipe pipe(mlp(3), {.balance = {3, 2},
                       .devices = std::move(devices),
                       .chunks = 4,
                       .schedule = {.name = "1f1b", .recompute = Checkpoint::kExceptLast},
                       .precision = precision});
    const double loss = pipe.train_step(x, target, mse).loss;
    return std::make_pair(loss, pipeline::testing::grads_of(pipe.module()));
  };
  // max over parameters of |a - b| / max(1, |b|_max)
  auto grad_diff = [](const nn::NamedTensors& a, const nn::NamedTensors& b) {
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      double scale = 1.0;
      for (double v : b[i].second.to_vector<double>()) scale = std::max(scale, std::abs(v));
      worst = std::max(worst, ops::max_abs_diff(a[i].second, b[i].second) / scale);
    }
    return worst;
  };
  auto [gpu_loss, gpu] = run({Device::cuda(0), Device::cuda(0)}, autograd::Precision::kBFloat16);
  auto [cpu_loss, cpu] = run({Device::cpu(0), Device::cpu(1)}, autograd::Precision::kBFloat16);
  auto [fp32_loss, fp32] = run({Device::cpu(0), Device::cpu(1)}, autograd::Precision::kFloat32);
  // Both sum float32 products of the same 16-bit values, in different orders: a sum a float32
  // rounding apart can round to the neighbouring bfloat16 value (2^-8 relative) at a layer
  // boundary, rarely (~K·2^-16 of the elements for K-term sums). Measured here: the GPU and
  // CPU steps agree far more closely than either agrees with float32.
  const double policy_effect = std::abs(cpu_loss - fp32_loss);
  CHECK(policy_effect > 5e-6);  // 30 float32 roundings of this ~1.0 loss
  CHECK(std::abs(gpu_loss - cpu_loss) <= 0.05 * policy_effect);
  INFO("loss: bf16 vs fp32 " << policy_effect << ", gpu vs cpu " << std::abs(gpu_loss - cpu_loss));
  CHECK(grad_diff(gpu, cpu) <= 0.05 * grad_diff(fp32, cpu));
}

TEST_CASE("a host stage feeding a GPU stage equals the plain model", "[cuda][pipe]") {
  if (!gpu_available_or_skip()) return;
  check_transparent({Device::cpu(0), Device::cuda(0)}, 4, Checkpoint::kExceptLast);
}

TEST_CASE("many steps: copy-stream memory is not reused early; losses and gradients match",
          "[cuda][pipe]") {
  // Repeated steps reuse cached blocks across the compute and copy streams; a block reused
  // before record_stream's events allowed it would corrupt activations or gradients and show
  // up here as a mismatch somewhere along the steps. Every step compares the loss and every
  // parameter gradient with the plain model's.
  const bool two = GENERATE(false, true);
  CAPTURE(two);
  if (!gpus_available_or_skip(two ? 2 : 1)) return;
  nn::Sequential plain = mlp(11);
  Pipe pipe(mlp(11), {.balance = {3, 2},
                      .devices = {Device::cuda(0), Device::cuda(two ? 1 : 0)},
                      .chunks = 8,
                      .schedule = {.recompute = Checkpoint::kAlways}});
  auto mse = [](const Tensor& o, const Tensor& t) { return nn::mse_loss(o, t); };
  for (int step = 0; step < 20; ++step) {
    CAPTURE(step);
    const Tensor x = randn({256, 16}, 100 + step), target = randn({256, 8}, 200 + step);
    plain.zero_grad();
    pipe.zero_grad();
    Tensor ref_loss = nn::mse_loss(plain.forward(x), target);
    ref_loss.backward();
    const std::string schedule = step % 2 == 0 ? "gpipe" : "1f1b";
    const double got = pipe.train_step(x, target, mse,
                                       {.schedule = named_schedule(pipe, x, schedule)}).loss;
    REQUIRE(std::abs(got - ref_loss.item()) <= kTol);
    REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
  }
}

TEST_CASE("skip connections between GPUs and from the host: portals equal the plain model",
          "[cuda][pipe][skip]") {
  // Stage 0 stashes 'a' (tanh of its activation) and 'b'; stage 1 pops 'b' and stashes 'c';
  // stage 2 pops 'a' (two stages on) and 'c'. Portals go device to device on the copy streams
  // (or, between stages of one device, with events only), every step reusing cached blocks.
  const bool host_first = GENERATE(false, true);
  CAPTURE(host_first);
  if (!gpu_available_or_skip()) return;  // one GPU: stages 1 and 2 share it (gpu_or_shared)
  auto model = [](uint64_t seed) {
    Generator g(seed);
    GeneratorGuard guard(g);
    return nn::Sequential(nn::Linear(16, 32), Stash("a", true), Stash("b"), nn::Linear(32, 32),
                          Pop("b"), nn::ReLU(), Stash("c"), nn::Linear(32, 32), Pop("a", true),
                          Pop("c"), nn::Linear(32, 8));
  };
  nn::Sequential plain = model(21);
  Pipe pipe(model(21), {.balance = {3, 4, 4},
                        .devices = {host_first ? Device::cpu(0) : gpu_or_shared(0),
                                    gpu_or_shared(1), gpu_or_shared(0)},
                        .chunks = 4,
                        .schedule = {.recompute = Checkpoint::kExceptLast}});
  auto mse = [](const Tensor& o, const Tensor& t) { return nn::mse_loss(o, t); };
  for (int step = 0; step < 6; ++step) {
    CAPTURE(step);
    const Tensor x = randn({32, 16}, 300 + step), target = randn({32, 8}, 400 + step);
    plain.zero_grad();
    pipe.zero_grad();
    Tensor ref_loss = nn::mse_loss(plain.forward(x), target);
    ref_loss.backward();
    if (step % 3 == 2) {
      Tensor out = pipe.forward(x);
      Tensor loss = nn::mse_loss(out, target.to(out.device()));
      loss.backward();
      REQUIRE(std::abs(loss.item() - ref_loss.item()) <= kTol);
    } else {
      const std::string schedule = step % 3 == 0 ? "1f1b" : "zb-h1";
      const double got = pipe.train_step(x, target, mse,
                                         {.schedule = named_schedule(pipe, x, schedule)}).loss;
      REQUIRE(std::abs(got - ref_loss.item()) <= kTol);
    }
    REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
  }
}

TEST_CASE("a stage's exception on a GPU reaches the caller; the Pipe stays usable",
          "[cuda][pipe]") {
  if (!gpu_available_or_skip()) return;
  auto countdown = std::make_shared<std::atomic<int>>(3);  // the 3rd micro-batch's forward
  Generator g(1);
  GeneratorGuard guard(g);
  nn::Sequential model(nn::Linear(16, 32), nn::ReLU(),
                       ThrowInForward(countdown, "stage exploded on the GPU"), nn::Linear(32, 8));
  Pipe pipe(std::move(model), {.balance = {2, 2},
                               .devices = {Device::cuda(0), Device::cuda(0)},
                               .chunks = 4});
  const Tensor x = randn({16, 16}, 2);
  REQUIRE_THROWS_MATCHES(pipe.forward(x), std::domain_error,
                         Catch::Message("stage exploded on the GPU"));
  countdown->store(1 << 30);  // disarmed
  Tensor out = pipe.forward(x);
  REQUIRE(out.shape() == Shape{16, 8});
  out.backward(Tensor::ones(out.shape(), {.device = out.device()}));
  for (const Tensor& p : pipe.parameters()) REQUIRE(p.grad().defined());
}

}  // namespace
}  // namespace pipewright::testing
