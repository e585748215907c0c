// A mixed-precision pipelined step computes what the un-pipelined model computes under the
// same precision policy (Note [The precision policy], autograd/precision.h): for every
// schedule family, 1, 2 and 4 workers and 1, 4 and 8 micro-batches, a bf16 or fp16
// train_step's micro-batch losses equal the plain model's, run micro-batch by micro-batch
// under PrecisionScope, bit for bit (the same products of the same 16-bit values, rounded at
// the same layer boundaries wherever the model is cut); the parameters' gradients differ from
// the plain model's only by the order in which float32 adds the micro-batches' contributions
// (bound: m·2^-24 relative, with m <= 8, below 1e-6). With one micro-batch the gradients are
// bitwise equal too. Checkpointed cells recompute the same values from the same working copies.
// Messages between stages travel as 16-bit tensors (Note [16-bit messages],
// pipeline/stage_fn.cc).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "nn/grad_scaler.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "nn/transformer.h"
#include "pipeline/pipe.h"
#include "tensor/generator.h"
#include "tests/compare.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;
using autograd::Precision;
using pipewright::testing::bitwise_equal;

namespace {

constexpr int64_t kDim = 8, kHeads = 2, kBatch = 8, kSeq = 4;

/// Eight children, so that 4 workers x 2 virtual stages each get one.
nn::Sequential model() {
  Generator generator(3);
  GeneratorGuard guard(generator);
  nn::Sequential m;
  m.push_back(nn::Linear(kDim, kDim));
  for (int i = 0; i < 6; ++i) m.push_back(nn::TransformerBlock(kDim, kHeads, {}));
  m.push_back(nn::Linear(kDim, kDim));
  return m;
}

Tensor mse(const Tensor& out, const Tensor& target) { return nn::mse_loss(out, target); }

std::vector<int> even_balance(int parts) {
  return std::vector<int>(static_cast<size_t>(parts), 8 / parts);
}

/// The plain model under `precision`, one micro-batch at a time (torch.chunk's split of the
/// rows), each micro-batch's loss backpropagated with the Pipe's seed n_j / N: the
/// micro-batch losses, gradients accumulating into `plain`.
std::vector<double> plain_microbatches(nn::Sequential& plain, const Tensor& x,
                                       const Tensor& target, int chunks, Precision precision) {
  const int64_t size = (kBatch + chunks - 1) / chunks;
  std::vector<double> losses;
  for (int64_t first = 0; first < kBatch; first += size) {
    const int64_t rows = std::min(size, kBatch - first);
    Tensor loss;
    {
      autograd::PrecisionScope scope(precision);
      loss = mse(plain.forward(x.slice(first, first + rows)), target.slice(first, first + rows));
    }
    loss.backward(Tensor::full(loss.shape(), static_cast<double>(rows) / kBatch));
    losses.push_back(loss.item());
  }
  return losses;
}

}  // namespace

TEST_CASE("a bf16 or fp16 train_step equals the plain model under the same policy, micro-batch "
          "by micro-batch, on every cut and schedule", "[pipe][precision]") {
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "zb-h1",
                                        "interleaved-1f1b", "zb-v");
  const int workers = GENERATE(1, 2, 4);
  const int chunks = GENERATE(1, 4, 8);
  const Precision precision = GENERATE(Precision::kBFloat16, Precision::kFloat16);
  const int v = schedule == "interleaved-1f1b" || schedule == "zb-v" ? 2 : 1;
  if (v == 2 && workers == 1) return;  // virtual stages need two workers
  if (schedule == "interleaved-1f1b" && chunks % workers != 0) return;  // refused: m % p
  CAPTURE(schedule, workers, chunks, autograd::precision_name(precision));
  const Tensor x = randn({kBatch, kSeq, kDim}, 5), target = randn({kBatch, kSeq, kDim}, 6);

  nn::Sequential plain = model();
  const std::vector<double> want = plain_microbatches(plain, x, target, chunks, precision);
  Pipe pipe(model(), {.balance = even_balance(workers * v),
                      .devices = cpus(0, workers),
                      .chunks = chunks,
                      .schedule = {.name = schedule, .virtual_stages = v,
                                   .recompute = Checkpoint::kExceptLast},
                      .precision = precision});
  const StepResult r = pipe.train_step(x, target, mse);
  REQUIRE(r.microbatch_losses == want);
  if (chunks == 1) {
    CHECK(bitwise_equal(grads_of(pipe.module()), grads_of(plain)));
  } else {
    CHECK(max_grad_diff(pipe.module(), plain) <= 1e-6);
  }
}

TEST_CASE("the policy changes the step, checkpointing does not", "[pipe][precision]") {
  const Tensor x = randn({kBatch, kSeq, kDim}, 7), target = randn({kBatch, kSeq, kDim}, 8);
  auto run = [&](Precision precision, Checkpoint mode) {
    Pipe pipe(model(), {.balance = {4, 4},
                        .devices = cpus(0, 2),
                        .chunks = 4,
                        .schedule = {.name = "1f1b", .recompute = mode},
                        .precision = precision});
    StepResult r = pipe.train_step(x, target, mse);
    if (mode == Checkpoint::kAlways) REQUIRE(r.counters.recomputes[0] > 0);
    return std::make_pair(r.loss, grads_of(pipe.module()));
  };
  const auto fp32 = run(Precision::kFloat32, Checkpoint::kNever);
  const auto bf16 = run(Precision::kBFloat16, Checkpoint::kNever);
  const auto bf16_recomputed = run(Precision::kBFloat16, Checkpoint::kAlways);
  // bfloat16's 8 significant bits move the loss far beyond float32 rounding, but not far.
  CHECK(std::abs(bf16.first - fp32.first) > 1e-5);
  CHECK(std::abs(bf16.first - fp32.first) < 1e-2 * std::abs(fp32.first));
  CHECK(bf16_recomputed.first == bf16.first);
  CHECK(bitwise_equal(bf16_recomputed.second, bf16.second));
}

TEST_CASE("under bf16 activations and gradients cross stages in half the bytes",
          "[pipe][precision]") {
  const Tensor x = randn({kBatch, kSeq, kDim}, 9), target = randn({kBatch, kSeq, kDim}, 10);
  auto message_bytes = [&](Precision precision) {
    Pipe pipe(model(), {.balance = {2, 3, 3}, .devices = cpus(0, 3), .chunks = 2,
                        .precision = precision});
    pipe.train_step(x, target, mse);
    std::vector<int64_t> bytes;
    const Trace trace = pipe.last_trace();
    for (const TraceTransfer& t : trace.transfers()) bytes.push_back(t.bytes);
    return bytes;
  };
  const std::vector<int64_t> fp32 = message_bytes(Precision::kFloat32);
  const std::vector<int64_t> bf16 = message_bytes(Precision::kBFloat16);
  // Each micro-batch: activations 0->1, 1->2 and gradients 2->1, 1->0, [4, 4, 8] each.
  REQUIRE(fp32.size() == 8);
  REQUIRE(bf16.size() == fp32.size());
  for (size_t i = 0; i < fp32.size(); ++i) {
    CHECK(fp32[i] == 4 * kSeq * kDim * 4);
    CHECK(bf16[i] == fp32[i] / 2);
  }
}

TEST_CASE("loss_scale scales every gradient exactly; unscale_grads undoes it", "[pipe][precision]") {
  const Tensor x = randn({kBatch, kSeq, kDim}, 11), target = randn({kBatch, kSeq, kDim}, 12);
  auto pipe_of = [] {
    return Pipe(model(), {.balance = {2, 3, 3}, .devices = cpus(0, 3), .chunks = 4,
                          .schedule = {.name = "zb-h1"}, .precision = Precision::kBFloat16});
  };
  Pipe plain = pipe_of(), scaled = pipe_of();
  const StepResult want = plain.train_step(x, target, mse);
  nn::GradScaler scaler;  // 2^16: a power of two, so scaling and unscaling are exact
  const StepResult got = scaled.train_step(x, target, mse, {.loss_scale = scaler.scale()});
  CHECK(got.microbatch_losses == want.microbatch_losses);  // the losses are unscaled
  CHECK_FALSE(scaled.unscale_grads(scaler));
  CHECK(bitwise_equal(grads_of(scaled.module()), grads_of(plain.module())));
}

TEST_CASE("an overflow in one stage's gradients skips the step on every stage",
          "[pipe][precision]") {
  const Tensor x = randn({kBatch, kSeq, kDim}, 13), target = randn({kBatch, kSeq, kDim}, 14);
  Pipe pipe(model(), {.balance = {4, 4}, .devices = cpus(0, 2), .chunks = 4,
                      .schedule = {.name = "1f1b"}, .precision = Precision::kFloat16});
  nn::Adam adam(pipe.parameters(), {.lr = 0.01});
  nn::GradScaler scaler;
  pipe.train_step(x, target, mse, {.loss_scale = scaler.scale()});
  REQUIRE(scaler.step(adam));  // (unscaled there) a clean first step: Adam has state
  scaler.update();
  adam.zero_grad();

  pipe.train_step(x, target, mse, {.loss_scale = scaler.scale()});
  // Stage 0's first weight overflowed in one element; stage 1's gradients are all finite.
  Tensor w = pipe.module()[0].parameters().at(0);
  std::vector<float> g = w.grad().to_vector<float>();
  g[3] = std::numeric_limits<float>::infinity();
  w.set_grad(Tensor::from_vector(g, w.shape()));
  const nn::NamedTensors params_before = params_of(pipe.module());
  const nn::NamedTensors state_before = adam.state_dict();
  CHECK(pipe.unscale_grads(scaler));
  CHECK_FALSE(scaler.step(adam));
  CHECK(bitwise_equal(params_of(pipe.module()), params_before));
  CHECK(bitwise_equal(adam.state_dict(), state_before));
  scaler.update();
  CHECK(scaler.scale() == 32768.0);
}

TEST_CASE("the whole step's grad_scaler equals loss_scale, unscale_grads and scaler.step bit "
          "for bit, skipped steps included", "[pipe][precision]") {
  struct Run {
    std::vector<double> losses, scales;
    std::vector<bool> stepped;
    nn::NamedTensors params, state;
  };
  // This model's float16 gradients hold at 2^16 and overflow at 2^40: every clean step grows
  // the scale to 2^40, every overflow backs it off to 2^16.
  const nn::GradScalerOptions alternating{.init_scale = 65536.0,
                                          .growth_factor = std::ldexp(1.0, 24),
                                          .backoff_factor = std::ldexp(1.0, -24),
                                          .growth_interval = 1};
  auto train = [&](bool whole) {
    Pipe pipe(model(), {.balance = {4, 4}, .devices = cpus(0, 2), .chunks = 4,
                        .schedule = {.name = "1f1b"}, .precision = Precision::kFloat16});
    nn::Adam adam(pipe.parameters(), {.lr = 0.01});
    nn::GradScaler scaler(alternating);
    Run run;
    for (int s = 0; s < 5; ++s) {
      const Tensor x = randn({kBatch, kSeq, kDim}, 60 + s);
      const Tensor target = randn({kBatch, kSeq, kDim}, 70 + s);
      run.scales.push_back(scaler.scale());
      if (whole) {
        const StepResult r = pipe.train_step(x, target, mse, adam, {.grad_scaler = &scaler});
        run.losses.push_back(r.loss);
        run.stepped.push_back(!r.skipped);
      } else {
        adam.zero_grad();
        run.losses.push_back(pipe.train_step(x, target, mse, {.loss_scale = scaler.scale()}).loss);
        pipe.unscale_grads(scaler);
        run.stepped.push_back(scaler.step(adam));
        scaler.update();
      }
    }
    run.params = params_of(pipe.module());
    run.state = adam.state_dict();
    return run;
  };
  const Run three = train(false), one = train(true);
  CHECK(three.stepped == std::vector<bool>{true, false, true, false, true});  // not vacuous
  CHECK(one.stepped == three.stepped);
  CHECK(one.scales == three.scales);
  CHECK(one.losses == three.losses);
  CHECK(bitwise_equal(one.params, three.params));
  CHECK(bitwise_equal(one.state, three.state));
}

TEST_CASE("grad_scaler belongs to the whole step, and replaces loss_scale", "[pipe][precision]") {
  Pipe pipe(model(), {.balance = {4, 4}, .devices = cpus(0, 2), .chunks = 2});
  nn::Adam adam(pipe.parameters(), {.lr = 0.01});
  nn::GradScaler scaler;
  const Tensor x = randn({kBatch, kSeq, kDim}, 19), target = randn({kBatch, kSeq, kDim}, 20);
  CHECK_THROWS_WITH(pipe.train_step(x, target, mse, adam,
                                    {.loss_scale = 2.0, .grad_scaler = &scaler}),
                    Catch::Contains("leave loss_scale 1"));
  CHECK_THROWS_WITH(pipe.train_step(x, target, mse, {.grad_scaler = &scaler}),
                    Catch::Contains("grad_scaler belongs to the whole step"));
  CHECK_THROWS_WITH(pipe.forward({x}, {.grad_scaler = &scaler}), Catch::Contains("grad_scaler"));
  CHECK_THROWS_WITH(pipe.forward({x}, {.max_grad_norm = 1.0}), Catch::Contains("max_grad_norm"));
  // A disabled scaler changes nothing.
  nn::GradScaler off({.enabled = false});
  CHECK_FALSE(pipe.train_step(x, target, mse, adam, {.grad_scaler = &off}).skipped);
  CHECK(off.scale() == 1.0);
}

TEST_CASE("under fp16 a scale too large overflows the 16-bit gradients, and is found",
          "[pipe][precision]") {
  const Tensor x = randn({kBatch, kSeq, kDim}, 15), target = randn({kBatch, kSeq, kDim}, 16);
  auto finds_overflow = [&](double scale) {
    Pipe pipe(model(), {.balance = {4, 4}, .devices = cpus(0, 2), .chunks = 2,
                        .precision = Precision::kFloat16});
    nn::GradScaler scaler({.init_scale = scale});
    pipe.train_step(x, target, mse, {.loss_scale = scaler.scale()});
    return pipe.unscale_grads(scaler);
  };
  CHECK_FALSE(finds_overflow(65536.0));
  CHECK(finds_overflow(std::ldexp(1.0, 40)));  // float16's largest value is 65504
}

TEST_CASE("loss_scale is refused where nothing would be scaled, and when not positive",
          "[pipe][precision]") {
  Pipe pipe(model(), {.balance = {4, 4}, .devices = cpus(0, 2), .chunks = 2});
  const Tensor x = randn({kBatch, kSeq, kDim}, 17), target = randn({kBatch, kSeq, kDim}, 18);
  CHECK_THROWS_WITH(pipe.forward({x}, {.loss_scale = 2.0}), Catch::Contains("loss_scale"));
  CHECK_THROWS_WITH(pipe.eval_step(x, target, mse, {.loss_scale = 2.0}),
                    Catch::Contains("loss_scale is 2"));
  CHECK_THROWS_WITH(pipe.train_step(x, target, mse, {.loss_scale = 0.0}),
                    Catch::Contains("positive and finite"));
}
