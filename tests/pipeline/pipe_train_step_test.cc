// The general train_step and eval_step (StepOptions): several inputs split on chosen dims or
// replicated, non-tensor arguments, tuple outputs and targets, returned outputs, mean and sum
// reductions, gradient accumulation, and the errors. The reference is the plain model run on
// the whole batch in float64, with the same arguments installed.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "nn/activation.h"
#include "nn/arguments.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "tensor/generator.h"
#include "tests/compare.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;
using pipewright::testing::bitwise_equal;

namespace {

constexpr TensorOptions kF64 = {.dtype = DType::kFloat64};

// [r, c] -> [c, r] through a product with the identity (the autograd has no transpose op).
// Modules and loss functions run on worker threads: they throw (Catch's REQUIRE is for the
// test's thread only).
Tensor transposed(const Tensor& z) {
  const int64_t k = z.size(0);
  std::vector<double> eye(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i) eye[static_cast<size_t>(i * k + i)] = 1;
  return autograd::matmul(z, Tensor::from_vector(eye, Shape{k, k}, z.device()),
                          /*trans_a=*/true);
}

void expect(size_t got, size_t expected, const std::string& what) {
  if (got != expected) {
    throw std::invalid_argument("expected " + std::to_string(expected) + " " + what + ", got " +
                                std::to_string(got));
  }
}

// The first stage of the test model: three inputs, x [n, 4] (split on dim 0), z [4, n]
// (split on dim 1) and w [4] (replicated): x + zᵀ·w (w broadcast over rows), times the
// argument "scale".
class Combine : public nn::Module {
 public:
  using nn::Module::forward;
  nn::Tensors forward(const nn::Tensors& in) override {
    expect(in.size(), 3, "inputs");
    const double scale = nn::current_arguments().get<double>("scale");
    return {autograd::mul(autograd::add(in[0], autograd::mul(transposed(in[1]), in[2])), scale)};
  }
  std::string str() const override { return "Combine()"; }
};

// The last stage's tail: one input y [n, 3] -> two outputs, y and yᵀ·argument "shift"
// ([3, n], gathered on dim 1); with the argument "negate" set, y is negated first.
class TwoOutputs : public nn::Module {
 public:
  using nn::Module::forward;
  nn::Tensors forward(const nn::Tensors& in) override {
    Tensor y = in.at(0);
    if (nn::current_arguments().get_or("negate", false)) y = autograd::neg(y);
    const double shift = static_cast<double>(nn::current_arguments().get<int64_t>("shift"));
    return {y, autograd::add(transposed(y), shift)};
  }
  std::string str() const override { return "TwoOutputs()"; }
};

nn::Sequential model(uint64_t seed) {
  Generator g(seed);
  GeneratorGuard guard(g);
  nn::Sequential m;
  m.push_back(Combine());
  m.push_back(nn::Linear(4, 8, true, kF64));
  m.push_back(nn::Tanh());
  m.push_back(nn::Linear(8, 3, true, kF64));
  m.push_back(TwoOutputs());
  return m;
}

Tensor randn64(const Shape& shape, uint64_t seed, bool requires_grad = false) {
  Tensor t = Tensor::empty(shape, kF64);
  Generator(seed).normal_(t);
  t.set_requires_grad(requires_grad);
  return t;
}

struct Data {
  Tensor x, z, w;   // inputs [N, 4], [4, N], [4]
  Tensor t0, t1;    // targets [N, 3], [3, N]
};

Data data(int64_t n, uint64_t seed, bool requires_grad) {
  return {randn64({n, 4}, seed, requires_grad), randn64({4, n}, seed + 1, requires_grad),
          randn64({4}, seed + 2, requires_grad), randn64({n, 3}, seed + 3),
          randn64({3, n}, seed + 4)};
}

// mean: (mse(out0, t0) + mse(out1, t1)) per micro-batch; sum: the same with summed squares.
TupleLossFn loss_fn(autograd::Reduction reduction) {
  return [reduction](const nn::Tensors& out, const nn::Tensors& t) {
    expect(out.size(), 2, "outputs");
    expect(t.size(), 2, "targets");
    return autograd::add(nn::mse_loss(out[0], t[0], reduction),
                         nn::mse_loss(out[1], t[1], reduction));
  };
}

StepOptions general(LossReduction reduction = LossReduction::kMean) {
  return {.input_chunks = {ChunkSpec::split(0), ChunkSpec::split(1), ChunkSpec::replicate()},
          .target_chunks = {ChunkSpec::split(0), ChunkSpec::split(-1)},
          .arguments = {{"scale", 0.5}, {"shift", int64_t{2}}},
          .reduction = reduction,
          .return_outputs = true,
          .output_dims = {0, 1}};
}

struct Reference {
  nn::Tensors out;
  double loss = 0;
  Data data;  // with the input gradients in .grad
};

// The plain model on the whole batch, with the step's arguments installed.
Reference plain_step(nn::Sequential& plain, int64_t n, uint64_t seed, const StepOptions& o) {
  Reference r;
  r.data = data(n, seed, true);
  nn::ArgumentsGuard with(o.arguments);
  r.out = plain.forward(nn::Tensors{r.data.x, r.data.z, r.data.w});
  const auto reduction = o.reduction == LossReduction::kMean ? autograd::Reduction::kMean
                                                              : autograd::Reduction::kSum;
  Tensor loss = loss_fn(reduction)(r.out, {r.data.t0, r.data.t1});
  r.loss = loss.item();
  loss.backward();
  return r;
}

}  // namespace

TEST_CASE("train_step with split dims, a replicated input, arguments and tuple outputs equals "
          "the plain model") {
  const int64_t n = 7;  // 3 chunks: 3, 3, 1 entries; 4 chunks: 2, 2, 2, 1
  struct Config {
    std::string schedule;
    std::vector<int> balance;
    int v;
    Checkpoint checkpoint;
    int chunks;
  };
  const std::vector<Config> configs = {
      {"gpipe", {2, 3}, 1, Checkpoint::kAlways, 3},
      {"1f1b", {2, 2, 1}, 1, Checkpoint::kExceptLast, 3},
      {"zb-h1", {1, 2, 2}, 1, Checkpoint::kNever, 3},
      {"interleaved-1f1b", {1, 1, 2, 1}, 2, Checkpoint::kAlways, 4},
      {"zb-v", {1, 2, 1, 1}, 2, Checkpoint::kExceptLast, 3},
  };
  for (const LossReduction reduction : {LossReduction::kMean, LossReduction::kSum}) {
    for (const Config& c : configs) {
      CAPTURE(c.schedule, reduction == LossReduction::kSum);
      const StepOptions options = general(reduction);  // the pipe runs c.schedule
      nn::Sequential plain = model(11);
      const Reference ref = plain_step(plain, n, 21, options);

      const int p = static_cast<int>(c.balance.size()) / c.v;
      Pipe pipe(model(11), {.balance = c.balance, .devices = cpus(0, p), .chunks = c.chunks,
                            .schedule = {.name = c.schedule, .virtual_stages = c.v,
                                         .recompute = c.checkpoint}});
      const Data d = data(n, 21, true);
      const StepResult r = pipe.train_step({d.x, d.z, d.w}, {d.t0, d.t1},
                                           loss_fn(reduction == LossReduction::kMean
                                                       ? autograd::Reduction::kMean
                                                       : autograd::Reduction::kSum),
                                           options);
      REQUIRE(r.microbatch_sizes == (c.chunks == 3 ? std::vector<int64_t>{3, 3, 1}
                                                   : std::vector<int64_t>{2, 2, 2, 1}));
      REQUIRE(r.loss == Approx(ref.loss).epsilon(1e-12));
      REQUIRE(max_grad_diff(pipe.module(), plain) < 1e-12);
      REQUIRE(max_diff(d.x.grad(), ref.data.x.grad()) < 1e-12);
      REQUIRE(max_diff(d.z.grad(), ref.data.z.grad()) < 1e-12);  // gathered on dim 1
      REQUIRE(max_diff(d.w.grad(), ref.data.w.grad()) < 1e-12);  // summed over micro-batches
      REQUIRE(r.outputs.size() == 2);
      REQUIRE(r.outputs[0].shape() == Shape{n, 3});
      REQUIRE(r.outputs[1].shape() == Shape{3, n});
      REQUIRE(max_diff(r.outputs[0], ref.out[0]) < 1e-12);
      REQUIRE(max_diff(r.outputs[1], ref.out[1]) < 1e-12);
      REQUIRE_FALSE(r.outputs[0].requires_grad());
      REQUIRE(r.outputs[0].device() == pipe.stage_devices().back());
    }
  }
}

TEST_CASE("the general forward (split dims, replicated, arguments, output dims) and its "
          "backward equal the plain model") {
  const int64_t n = 7;
  const StepOptions o = general();
  const StepOptions f{.input_chunks = o.input_chunks,
                      .arguments = o.arguments,
                      .output_dims = o.output_dims};
  for (const Checkpoint checkpoint :
       {Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever}) {
    CAPTURE(to_string(checkpoint));
    nn::Sequential plain = model(13);
    const Reference ref = plain_step(plain, n, 17, o);
    Pipe pipe(model(13), {.balance = {1, 2, 2}, .devices = cpus(0, 3), .chunks = 3,
                          .schedule = {.recompute = checkpoint}});
    const Data d = data(n, 17, true);
    const nn::Tensors out = pipe.forward({d.x, d.z, d.w}, f);
    REQUIRE(out.size() == 2);
    REQUIRE(out[1].shape() == Shape{3, n});  // gathered on dim 1
    REQUIRE(max_diff(out[0], ref.out[0]) < 1e-12);
    REQUIRE(max_diff(out[1], ref.out[1]) < 1e-12);
    // The loss over the gathered outputs, as a user of forward() computes it; its backward
    // cuts out[1]'s gradient on dim 1 and runs the recomputes with the arguments.
    const Device last = pipe.stage_devices().back();  // where forward() returns the outputs
    Tensor loss = loss_fn(autograd::Reduction::kMean)(out, {d.t0.to(last), d.t1.to(last)});
    REQUIRE(loss.item() == Approx(ref.loss).epsilon(1e-12));
    loss.backward();
    REQUIRE(max_grad_diff(pipe.module(), plain) < 1e-12);
    REQUIRE(max_diff(d.x.grad(), ref.data.x.grad()) < 1e-12);
    REQUIRE(max_diff(d.z.grad(), ref.data.z.grad()) < 1e-12);
    REQUIRE(max_diff(d.w.grad(), ref.data.w.grad()) < 1e-12);
  }

  Pipe pipe(model(13), {.balance = {1, 2, 2}, .devices = cpus(0, 3), .chunks = 3});
  const Data d = data(n, 17, false);
  StepOptions wrong = f;
  wrong.output_dims = {0};
  REQUIRE_THROWS_WITH(pipe.forward({d.x, d.z, d.w}, wrong), "1 output dims for 2 outputs");
  wrong = f;
  wrong.input_chunks.pop_back();
  REQUIRE_THROWS_WITH(pipe.forward({d.x, d.z, d.w}, wrong), Catch::Contains("2 chunk specs"));
  wrong = f;
  wrong.arguments = {{"shift", int64_t{2}}};
  REQUIRE_THROWS_WITH(pipe.forward({d.x, d.z, d.w}, wrong),
                      "no argument 'scale' in this call (arguments: shift)");
}

TEST_CASE("the arguments reach every stage and every recompute; a missing one names itself") {
  const int64_t n = 6;
  StepOptions o = general();
  o.arguments.set("negate", true);
  nn::Sequential plain = model(3);
  const Reference ref = plain_step(plain, n, 5, o);
  Pipe pipe(model(3), {.balance = {1, 2, 2}, .devices = cpus(0, 3), .chunks = 2,
                       .schedule = {.recompute = Checkpoint::kAlways}});
  const Data d = data(n, 5, false);
  const StepResult r = pipe.train_step({d.x, d.z, d.w}, {d.t0, d.t1},
                                       loss_fn(autograd::Reduction::kMean), o);
  REQUIRE(r.loss == Approx(ref.loss).epsilon(1e-12));
  REQUIRE(max_grad_diff(pipe.module(), plain) < 1e-12);
  REQUIRE(r.counters.recomputes == std::vector<int>{2, 2, 2});  // the recomputes saw them too

  StepOptions missing = general();
  missing.arguments = {{"shift", int64_t{2}}};
  REQUIRE_THROWS_WITH(pipe.train_step({d.x, d.z, d.w}, {d.t0, d.t1},
                                      loss_fn(autograd::Reduction::kMean), missing),
                      "no argument 'scale' in this call (arguments: shift)");
  REQUIRE(pipe.last_failure().has_value());
  REQUIRE(pipe.last_failure()->action.stage == 0);
}

TEST_CASE("eval_step runs forward and loss only, touching no gradient") {
  const int64_t n = 7;
  const StepOptions o = general();
  nn::Sequential plain = model(4);
  plain.eval();
  const Reference ref = plain_step(plain, n, 8, o);
  for (int v : {1, 2}) {
    CAPTURE(v);
    Pipe pipe(model(4), {.balance = {1, 2, 1, 1}, .devices = cpus(0, 4 / v), .chunks = 3,
                         .schedule = {.name = v == 1 ? "gpipe" : "interleaved-1f1b",
                                      .virtual_stages = v}});
    pipe.eval();
    const Data d = data(n, 8, true);
    const StepResult r = pipe.eval_step({d.x, d.z, d.w}, {d.t0, d.t1},
                                        loss_fn(autograd::Reduction::kMean), o);
    REQUIRE(r.loss == Approx(ref.loss).epsilon(1e-12));
    REQUIRE(max_diff(r.outputs[0], ref.out[0]) < 1e-12);
    REQUIRE(max_diff(r.outputs[1], ref.out[1]) < 1e-12);
    for (const Tensor& param : pipe.parameters()) REQUIRE_FALSE(param.grad().defined());
    REQUIRE_FALSE(d.x.grad().defined());
    REQUIRE(r.counters.forwards == std::vector<int>{3, 3, 3, 3});
    REQUIRE(r.counters.backwards == std::vector<int>{0, 0, 0, 0});
    REQUIRE(r.counters.recomputes == std::vector<int>{0, 0, 0, 0});
    for (const auto& worker : r.schedule.actions) {
      for (const Action& a : worker) REQUIRE(a.kind == ActionKind::kForward);
    }
  }
}

TEST_CASE("eval_step returns a non-finite loss instead of throwing; train_step throws") {
  Pipe pipe(small_mlp(1), {.balance = {3, 2}, .devices = cpus(0, 2), .chunks = 2});
  const Tensor x = randn({4, 4}, 1), y = randn({4, 3}, 2);
  const LossFn nan_loss = [](const Tensor& out, const Tensor&) {
    return autograd::mul(autograd::sum(out), std::numeric_limits<double>::quiet_NaN());
  };
  REQUIRE(std::isnan(pipe.eval_step(x, y, nan_loss).loss));
  REQUIRE_THROWS_AS(pipe.train_step(x, y, nan_loss), std::domain_error);
}

TEST_CASE("gradients accumulated over two steps equal one step on the union") {
  const int64_t n = 8;
  const Data whole = data(n, 30, false);
  auto half = [&](const Tensor& t, int dim, int k) {
    // Rows (dim 0) or columns (dim 1) [4k, 4k + 4) of t.
    std::vector<int64_t> sizes = {4, 4};
    return split_to({t}, {ChunkSpec::split(dim)}, sizes, "t")[static_cast<size_t>(k)][0];
  };
  for (const LossReduction reduction : {LossReduction::kSum, LossReduction::kMean}) {
    CAPTURE(reduction == LossReduction::kSum);
    const auto plain_reduction = reduction == LossReduction::kSum ? autograd::Reduction::kSum
                                                                   : autograd::Reduction::kMean;
    StepOptions o = general(reduction);
    Pipe once(model(9), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 2,
                         .schedule = {.name = "1f1b"}});
    once.train_step({whole.x, whole.z, whole.w}, {whole.t0, whole.t1}, loss_fn(plain_reduction),
                    o);
    Pipe twice(model(9), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 2,
                          .schedule = {.name = "1f1b"}});
    for (int k = 0; k < 2; ++k) {
      twice.train_step({half(whole.x, 0, k), half(whole.z, 1, k), whole.w},
                       {half(whole.t0, 0, k), half(whole.t1, 1, k)}, loss_fn(plain_reduction),
                       o);
    }
    // Sum: the union's gradient is the sum of the halves'. Mean over equal halves: twice it.
    const nn::NamedTensors a = once.module().named_parameters();
    const nn::NamedTensors b = twice.module().named_parameters();
    const double factor = reduction == LossReduction::kSum ? 1.0 : 0.5;
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(a[i].first);
      const std::vector<double> ga = a[i].second.grad().to_vector<double>();
      const std::vector<double> gb = b[i].second.grad().to_vector<double>();
      for (size_t e = 0; e < ga.size(); ++e) REQUIRE(ga[e] == Approx(factor * gb[e]).margin(1e-13));
    }
  }
}

TEST_CASE("the general train_step names what does not fit") {
  Pipe pipe(model(1), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 2});
  const Data d = data(6, 1, false);
  const TupleLossFn loss = loss_fn(autograd::Reduction::kMean);
  const StepOptions o = general();
  auto with = [&](auto change) {
    StepOptions changed = o;
    change(changed);
    return changed;
  };
  // z split on dim 0 has 4 entries, x has 6.
  REQUIRE_THROWS_WITH(
      pipe.train_step({d.x, d.z, d.w}, {d.t0, d.t1}, loss,
                      with([](StepOptions& c) { c.input_chunks[1] = ChunkSpec::split(0); })),
      "pipeline inputs differ in batch size (input 0: [6, 4] on dim 0, input 1: [4, 6] on dim 0)");
  REQUIRE_THROWS_WITH(
      pipe.train_step({d.x, d.z, d.w}, {d.t0, d.t1}, loss,
                      with([](StepOptions& c) { c.input_chunks[1] = ChunkSpec::split(2); })),
      "pipeline input 1 of shape [4, 6] has no dim 2 to split on");
  REQUIRE_THROWS_WITH(
      pipe.train_step({d.x, d.z, d.w}, {d.t0, d.t1}, loss,
                      with([](StepOptions& c) { c.input_chunks.pop_back(); })),
      "2 chunk specs for 3 inputs");
  REQUIRE_THROWS_WITH(
      pipe.train_step({d.x, d.z, d.w}, {d.t0, d.t1}, loss,
                      with([](StepOptions& c) { c.input_chunks.assign(3, ChunkSpec::replicate()); })),
      "every pipeline input is replicated (ChunkSpec::replicate): nothing to split");
  REQUIRE_THROWS_WITH(
      pipe.train_step({d.x, d.z, d.w}, {d.t0, d.t1}, loss,
                      with([](StepOptions& c) { c.target_chunks[1] = ChunkSpec::split(0); })),
      "target 1 of shape [3, 6] has 3 entries on dim 0, the batch has 6");
  REQUIRE_THROWS_WITH(
      pipe.train_step({d.x, d.z, d.w}, {d.t0, d.t1}, loss,
                      with([](StepOptions& c) { c.output_dims = {0}; })),
      "1 output dims for 2 outputs");
  REQUIRE_THROWS_WITH(
      pipe.train_step({d.x, d.z, d.w}, {d.t0}, loss,
                      with([](StepOptions& c) { c.target_chunks.pop_back(); })),
      "expected 2 targets, got 1");  // the loss function's own error reaches the caller
  REQUIRE_THROWS_WITH(pipe.train_step({d.x, d.z, d.w}, {d.t0, d.t1}, TupleLossFn(), o),
                      "train_step: loss_fn is empty");
}

// The last layer of a model with two outputs.
class Duplicate : public nn::Module {
 public:
  using nn::Module::forward;
  nn::Tensors forward(const nn::Tensors& in) override { return {in.at(0), in.at(0)}; }
  std::string str() const override { return "Duplicate()"; }
};

TEST_CASE("the single-tensor train_step on a model with two outputs says which form to use") {
  nn::Sequential m = small_mlp(2);
  m.push_back(Duplicate());
  Pipe pipe(std::move(m), {.balance = {3, 3}, .devices = cpus(0, 2), .chunks = 2});
  REQUIRE_THROWS_WITH(
      pipe.train_step(randn({4, 4}, 1), randn({4, 3}, 2),
                      [](const Tensor& out, const Tensor&) { return autograd::sum(out); }),
      "train_step: the last stage must return one tensor for the loss, got 2 (use the "
      "nn::Tensors form of train_step)");
}

TEST_CASE("train_step and eval_step take nn::mse_loss and nn::cross_entropy themselves") {
  Pipe pipe(small_mlp(21), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 3});
  Pipe same(small_mlp(21), {.balance = {2, 3}, .devices = cpus(2, 2), .chunks = 3});
  const Tensor x = randn({9, 4}, 22), y = randn({9, 3}, 23);
  const StepResult direct = pipe.train_step(x, y, nn::mse_loss,
                                            {.schedule = named_schedule(pipe, x, "1f1b")});
  auto lambda = [](const Tensor& out, const Tensor& t) { return nn::mse_loss(out, t); };
  const StepResult through_lambda = same.train_step(x, y, lambda,
                                                    {.schedule = named_schedule(same, x, "1f1b")});
  REQUIRE(direct.loss == through_lambda.loss);
  REQUIRE(bitwise_equal(grads_of(pipe.module()), grads_of(same.module())));
  REQUIRE(pipe.eval_step(x, y, nn::mse_loss).loss == same.eval_step(x, y, lambda).loss);

  const Tensor labels = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 2, 1, 0, 0, 1, 2});
  pipe.zero_grad();
  same.zero_grad();
  auto ce = [](const Tensor& out, const Tensor& t) { return nn::cross_entropy(out, t); };
  REQUIRE(pipe.train_step(x, labels, nn::cross_entropy).loss ==
          same.train_step(x, labels, ce).loss);
  REQUIRE(bitwise_equal(grads_of(pipe.module()), grads_of(same.module())));
}
