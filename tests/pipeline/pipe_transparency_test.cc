// Transparency (torchgpipe's test_transparency): for many balances, chunk counts (including
// batch < chunks and uneven splits), checkpoint modes and tuple inputs, the pipelined model's
// output, loss, input gradient and every parameter gradient equal the plain model's to float32
// rounding. Two identical models are built from the same seed.
#include <catch2/catch.hpp>

#include <algorithm>

#include "autograd/functions.h"
#include "autograd/node.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule/registry.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

namespace {
constexpr double kTol = 2e-6;  // float32 rounding of reassociated sums at these sizes

/// From zeroed gradients: pipe.forward + MSE backward against `plain` on the same batch.
void check_forward_equals_plain(Pipe& pipe, nn::Sequential& plain, const Tensor& x0,
                                const Tensor& target) {
  plain.zero_grad();
  pipe.zero_grad();
  PlainRun ref = plain_model_run(plain, x0, target);
  Tensor x = x0.clone().set_requires_grad(true);
  Tensor out = pipe.forward(x);
  nn::mse_loss(out, target.to(out.device())).backward();
  REQUIRE(max_diff(out, ref.out) <= kTol);
  REQUIRE(max_diff(x.grad(), ref.input_grad) <= kTol);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
}
}  // namespace

TEST_CASE("Pipe::forward and loss.backward() equal the plain model") {
  const std::vector<int> balance = GENERATE(values<std::vector<int>>(
      {{5}, {1, 4}, {2, 3}, {4, 1}, {2, 2, 1}, {1, 1, 1, 1, 1}}));
  const int chunks = GENERATE(1, 3, 4, 8);
  const int64_t batch = GENERATE(2, 7, 8);
  const Checkpoint mode =
      GENERATE(Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever);
  CAPTURE(balance, chunks, batch, to_string(mode));

  nn::Sequential plain = small_mlp(1);
  Pipe pipe(small_mlp(1), {.balance = balance,
                           .devices = cpus(0, static_cast<int>(balance.size())),
                           .chunks = chunks,
                           .schedule = {.recompute = mode}});
  const Tensor x0 = randn({batch, 4}, 2);
  const Tensor target = randn({batch, 3}, 3);
  PlainRun ref = plain_model_run(plain, x0, target);

  Tensor x = x0.clone().set_requires_grad(true);
  Tensor out = pipe.forward(x);
  REQUIRE(out.device() == pipe.stage_devices().back());
  REQUIRE(out.grad_fn() != nullptr);
  REQUIRE(std::string(out.grad_fn()->name()) == "PipeBackward");
  Tensor loss = nn::mse_loss(out, target.to(out.device()));
  loss.backward();

  REQUIRE(max_diff(out, ref.out) <= kTol);
  REQUIRE(std::abs(loss.item() - ref.loss.item()) <= kTol);
  REQUIRE(max_diff(x.grad(), ref.input_grad) <= kTol);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
}

TEST_CASE("train_step equals the plain model's mean loss and gradients") {
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "zb-h1", "zb-h2");
  const std::vector<int> balance = GENERATE(values<std::vector<int>>({{2, 3}, {2, 2, 1}}));
  const int chunks = GENERATE(1, 4, 6);
  const int64_t batch = GENERATE(3, 7, 12);
  const Checkpoint mode =
      GENERATE(Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever);
  CAPTURE(schedule, balance, chunks, batch, to_string(mode));

  nn::Sequential plain = small_mlp(5);
  Pipe pipe(small_mlp(5), {.balance = balance,
                           .devices = cpus(3, static_cast<int>(balance.size())),
                           .chunks = chunks,
                           .schedule = {.name = schedule, .recompute = mode}});
  const Tensor x0 = randn({batch, 4}, 6);
  const Tensor target = randn({batch, 3}, 7);
  PlainRun ref = plain_model_run(plain, x0, target);

  Tensor x = x0.clone().set_requires_grad(true);
  auto loss_fn = [](const Tensor& out, const Tensor& t) { return nn::mse_loss(out, t); };
  StepResult r = pipe.train_step(x, target, loss_fn);

  REQUIRE(std::abs(r.loss - ref.loss.item()) <= kTol);
  REQUIRE(r.microbatch_losses.size() == r.microbatch_sizes.size());
  REQUIRE(max_diff(x.grad(), ref.input_grad) <= kTol);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
}

TEST_CASE("interleaved 1F1B (virtual stages) equals the plain model") {
  const int chunks = GENERATE(2, 4, 8);
  const Checkpoint mode = GENERATE(Checkpoint::kExceptLast, Checkpoint::kNever);
  CAPTURE(chunks, to_string(mode));
  nn::Sequential plain = small_mlp(8);
  // 4 virtual stages on 2 workers: stages 0, 2 on worker 0 (cpu:7), 1, 3 on worker 1 (cpu:8).
  Pipe pipe(small_mlp(8), {.balance = {1, 2, 1, 1},
                           .devices = cpus(7, 2),
                           .chunks = chunks,
                           .schedule = {.name = "interleaved-1f1b", .virtual_stages = 2,
                                        .recompute = mode}});
  REQUIRE(pipe.num_workers() == 2);
  REQUIRE(pipe.num_stages() == 4);
  REQUIRE(pipe.stage_devices() == std::vector<Device>{Device::cpu(7), Device::cpu(8), Device::cpu(7),
                                                Device::cpu(8)});
  const Tensor x0 = randn({8, 4}, 9);
  const Tensor target = randn({8, 3}, 10);
  PlainRun ref = plain_model_run(plain, x0, target);
  Tensor x = x0.clone().set_requires_grad(true);
  StepResult r = pipe.train_step(
      x, target, [](const Tensor& out, const Tensor& t) { return nn::mse_loss(out, t); });
  REQUIRE(std::abs(r.loss - ref.loss.item()) <= kTol);
  REQUIRE(max_diff(x.grad(), ref.input_grad) <= kTol);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
  // Pipe::forward runs looped BFS over the same placement; its backward too.
  check_forward_equals_plain(pipe, plain, x0, target);
}

TEST_CASE("the frontier schedules (V-shaped and interleaved zero bubble, looped BFS) equal the "
          "plain model") {
  const std::string schedule =
      GENERATE(as<std::string>{}, "zb-v", "dualpipev", "interleaved-zb", "looped-bfs");
  const Checkpoint mode =
      GENERATE(Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever);
  const int chunks = GENERATE(4, 6);
  CAPTURE(schedule, to_string(mode), chunks);
  nn::Sequential plain = small_mlp(14);
  // 4 stages on 2 workers: V (stages 0 and 3 on worker 0) or round robin (0 and 2).
  Pipe pipe(small_mlp(14), {.balance = {1, 2, 1, 1},
                            .devices = cpus(20, 2),
                            .chunks = chunks,
                            .schedule = {.name = schedule, .virtual_stages = 2,
                                         .recompute = mode}});
  const bool v_shape = schedule == "zb-v" || schedule == "dualpipev";
  REQUIRE(pipe.stage_devices() == (v_shape ? std::vector<Device>{Device::cpu(20), Device::cpu(21),
                                                           Device::cpu(21), Device::cpu(20)}
                                     : std::vector<Device>{Device::cpu(20), Device::cpu(21),
                                                           Device::cpu(20), Device::cpu(21)}));
  const Tensor x0 = randn({12, 4}, 15), target = randn({12, 3}, 16);
  PlainRun ref = plain_model_run(plain, x0, target);
  Tensor x = x0.clone().set_requires_grad(true);
  StepResult r = pipe.train_step(
      x, target, [](const Tensor& out, const Tensor& t) { return nn::mse_loss(out, t); });
  REQUIRE(r.schedule.name == schedule);
  REQUIRE(std::abs(r.loss - ref.loss.item()) <= kTol);
  REQUIRE(max_diff(x.grad(), ref.input_grad) <= kTol);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
  // Pipe::forward and its backward on the same placement (looped BFS over it).
  check_forward_equals_plain(pipe, plain, x0, target);
}

// A schedule registered at run time (docs/schedules.md, "Write your own schedule") is a name
// like the built-in ones: the Pipe takes its placement from the row and train_step its
// generator. The toy: ZB-V's order and V placement under another name.
TEST_CASE("a registered schedule trains by name, placed as its row says") {
  const std::vector<std::string> names = schedule_names();
  if (std::find(names.begin(), names.end(), "toy-v") == names.end()) {
    register_schedule({.name = "toy-v",
                       .generate = [](int p, int m, int) {
                         Schedule s = make_schedule("zb-v", p, m, 2);
                         s.name = "toy-v";
                         return s;
                       },
                       .virtual_stages = {2, 2},
                       .placement = StagePlacement::kV,
                       .splits_backward = true,
                       .description = "ZB-V by another name"});
  }
  nn::Sequential plain = small_mlp(14);
  Pipe pipe(small_mlp(14), {.balance = {1, 2, 1, 1},
                            .devices = cpus(20, 2),
                            .chunks = 4,
                            .schedule = {.name = "toy-v", .virtual_stages = 2,
                                         .recompute = Checkpoint::kNever}});
  REQUIRE(pipe.stage_devices() == std::vector<Device>{Device::cpu(20), Device::cpu(21),
                                                Device::cpu(21), Device::cpu(20)});
  const Tensor x0 = randn({12, 4}, 15), target = randn({12, 3}, 16);
  PlainRun ref = plain_model_run(plain, x0, target);
  Tensor x = x0.clone().set_requires_grad(true);
  StepResult r = pipe.train_step(
      x, target, [](const Tensor& out, const Tensor& t) { return nn::mse_loss(out, t); });
  REQUIRE(r.schedule.name == "toy-v");
  REQUIRE(std::abs(r.loss - ref.loss.item()) <= kTol);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
}

TEST_CASE("a schedule placed differently from the pipe is refused, naming the stage") {
  Pipe pipe(small_mlp(1), {.balance = {1, 2, 1, 1},
                           .devices = cpus(0, 2),
                           .chunks = 4,
                           .schedule = {.name = "interleaved-1f1b", .virtual_stages = 2}});
  const Tensor x = randn({4, 4}, 1), t = randn({4, 3}, 2);
  auto mse = [](const Tensor& out, const Tensor& y) { return nn::mse_loss(out, y); };
  REQUIRE_THROWS_WITH(pipe.train_step(x, t, mse, {.schedule = named_schedule(pipe, x, "zb-v")}),
                      "schedule 'zb-v' runs stage 2 on worker 1, the pipe on worker 0");
  REQUIRE_THROWS_WITH(
      Pipe(small_mlp(1), {.balance = {1, 2, 1, 1},
                          .devices = cpus(0, 2),
                          .schedule = {.virtual_stages = 2, .stage_worker = {0, 1, 1, 2}}}),
      "stage_worker[3] = 2 is not a worker (0..1)");
  REQUIRE_THROWS_WITH(
      Pipe(small_mlp(1), {.balance = {1, 2, 1, 1},
                          .devices = cpus(0, 2),
                          .schedule = {.virtual_stages = 2, .stage_worker = {1, 1, 1, 1}}}),
      "stage_worker gives worker 0 no stage");
}

TEST_CASE("several stages may share one device") {
  nn::Sequential plain = small_mlp(11);
  Pipe pipe(small_mlp(11), {.balance = {2, 2, 1},
                            .devices = {Device::cpu(0), Device::cpu(0), Device::cpu(0)},
                            .chunks = 3});
  const Tensor x0 = randn({6, 4}, 12), target = randn({6, 3}, 13);
  PlainRun ref = plain_model_run(plain, x0, target);
  Tensor x = x0.clone().set_requires_grad(true);
  nn::mse_loss(pipe.forward(x), target).backward();
  REQUIRE(max_diff(x.grad(), ref.input_grad) <= kTol);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
}

// ---- tuple inputs ----

namespace {
// {x [N,4], c [N,8] or [8]} -> {relu(x·W1ᵀ) + c, c}: a stage that takes and passes a tuple.
class Branch : public nn::Module {
 public:
  Branch() : linear_(register_module("linear", std::make_shared<nn::Linear>(4, 8))) {}
  nn::Tensors forward(const nn::Tensors& in) override {
    return {autograd::add(autograd::relu(linear_->forward(in.at(0))), in.at(1)), in.at(1)};
  }
  std::string str() const override { return "Branch()"; }

 private:
  std::shared_ptr<nn::Linear> linear_;
};

// {h [N,8], c} -> {tanh(h) · c}  (c broadcast when [8]).
class Merge : public nn::Module {
 public:
  nn::Tensors forward(const nn::Tensors& in) override {
    return {autograd::mul(autograd::tanh(in.at(0)), in.at(1))};
  }
  std::string str() const override { return "Merge()"; }
};

nn::Sequential tuple_model(uint64_t seed) {
  Generator g(seed);
  GeneratorGuard guard(g);
  return nn::Sequential(Branch(), Merge(), nn::Linear(8, 3));
}
}  // namespace

TEST_CASE("tuple inputs, chunked or replicated (torchgpipe's NoChunk), are transparent") {
  const bool replicate = GENERATE(false, true);
  const int chunks = GENERATE(1, 2, 3);
  const std::vector<int> balance = GENERATE(values<std::vector<int>>({{1, 2}, {1, 1, 1}}));
  CAPTURE(replicate, chunks, balance);
  const int64_t batch = 5;

  nn::Sequential plain = tuple_model(21);
  Pipe pipe(tuple_model(21), {.balance = balance,
                              .devices = cpus(0, static_cast<int>(balance.size())),
                              .chunks = chunks,
                              .schedule = {.recompute = Checkpoint::kExceptLast}});
  const Tensor x0 = randn({batch, 4}, 22);
  const Tensor c0 = replicate ? randn({8}, 23) : randn({batch, 8}, 23);
  const Tensor target = randn({batch, 3}, 24);

  Tensor xr = x0.clone().set_requires_grad(true), cr = c0.clone().set_requires_grad(true);
  Tensor ref_out = plain.forward(nn::Tensors{xr, cr}).at(0);
  nn::mse_loss(ref_out, target).backward();

  Tensor x = x0.clone().set_requires_grad(true), c = c0.clone().set_requires_grad(true);
  nn::Tensors out = pipe.forward(
      {x, c}, {.input_chunks = {ChunkSpec::split(),
                                replicate ? ChunkSpec::replicate() : ChunkSpec::split()}});
  REQUIRE(out.size() == 1);
  nn::mse_loss(out[0], target.to(out[0].device())).backward();

  REQUIRE(max_diff(out[0], ref_out) <= kTol);
  REQUIRE(max_diff(x.grad(), xr.grad()) <= kTol);
  REQUIRE(max_diff(c.grad(), cr.grad()) <= kTol);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
}

TEST_CASE("an input that does not require grad gets none, parameters still do") {
  nn::Sequential plain = small_mlp(31);
  Pipe pipe(small_mlp(31), {.balance = {2, 3}, .devices = cpus(0, 2), .chunks = 2});
  const Tensor x = randn({4, 4}, 32), target = randn({4, 3}, 33);
  nn::mse_loss(plain.forward(x), target).backward();
  nn::mse_loss(pipe.forward(x), target.to(Device::cpu(1))).backward();
  REQUIRE_FALSE(x.grad().defined());
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
}
