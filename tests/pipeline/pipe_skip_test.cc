// Skip connections across stages (nn/skip.h, pipeline/skip_layout.h, Note [Portals]):
// transparency against the un-pipelined model for many balances (a pop on the stash's own
// stage, one and two stages later) × chunks × checkpoint modes × schedules, input gradients
// included; namespaces; deferred BatchNorm; every error; and the bytes each stage's device
// holds (the skip tensor never reaches the stages between, and nothing stashed outlives the
// backward).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <memory>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/skip.h"
#include "pipeline/pipe.h"
#include "pipeline/skip_layout.h"
#include "tensor/allocator.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

namespace {

constexpr double kTol = 2e-6;

/// Nine children, two skips:
///   0 Linear(4,6)  1 Stash(a, tanh)  2 Linear(6,6)  3 Stash(b)  4 ReLU
///   5 Pop(a, mul)  6 Linear(6,6)     7 Pop(b, add)  8 Linear(6,3)
nn::Sequential skip_model(uint64_t seed) {
  Generator g(seed);
  GeneratorGuard guard(g);
  return nn::Sequential(nn::Linear(4, 6), Stash("a", true), nn::Linear(6, 6), Stash("b"),
                        nn::ReLU(), Pop("a", true), nn::Linear(6, 6), Pop("b"),
                        nn::Linear(6, 3));
}

Tensor mse(const Tensor& out, const Tensor& t) { return nn::mse_loss(out, t); }

/// pipe.train_step against `plain` on the same batch: the loss, the input gradient and every
/// parameter gradient.
void check_train_step_equals_plain(Pipe& pipe, nn::Sequential& plain, const Tensor& x0,
                                   const Tensor& target) {
  PlainRun ref = plain_model_run(plain, x0, target);
  Tensor x = x0.clone().set_requires_grad(true);
  StepResult r = pipe.train_step(x, target, mse);
  REQUIRE(std::abs(r.loss - ref.loss.item()) <= kTol);
  REQUIRE(max_diff(x.grad(), ref.input_grad) <= kTol);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
}

// Balances of skip_model and where its skips go: a (child 1 -> 5), b (child 3 -> 7).
const std::vector<std::vector<int>> kBalances = {
    {9},                          // both local
    {6, 3},                       // a local to stage 0, b crosses one boundary
    {2, 3, 4},                    // a crosses two (0 -> 2), b one (1 -> 2)
    {3, 3, 3},                    // a 0 -> 1, b 1 -> 2
    {1, 1, 1, 1, 1, 1, 1, 1, 1},  // a 1 -> 5, b 3 -> 7: through 3 stages each
};

}  // namespace

TEST_CASE("the skip model runs un-pipelined through the thread's default tracker") {
  nn::Sequential model = skip_model(1);
  const Tensor x = randn({5, 4}, 2);
  const Tensor out = model.forward(x);
  REQUIRE(out.shape() == Shape{5, 3});
  // Same as writing the skips out by hand.
  nn::Sequential same = skip_model(1);
  auto& l0 = static_cast<nn::Linear&>(same[0]);
  auto& l2 = static_cast<nn::Linear&>(same[2]);
  auto& l6 = static_cast<nn::Linear&>(same[6]);
  auto& l8 = static_cast<nn::Linear&>(same[8]);
  const Tensor h0 = l0.forward(x);
  const Tensor h2 = l2.forward(h0);
  const Tensor h5 = autograd::mul(autograd::relu(h2), autograd::tanh(h0));
  const Tensor h7 = autograd::add(l6.forward(h5), h2);
  REQUIRE(max_diff(out, l8.forward(h7)) == 0);
}

TEST_CASE("the layout routes each skip from its stashing stage to its popping stage") {
  nn::Sequential model = skip_model(1);
  SkipLayout layout(model, {2, 3, 4});
  REQUIRE(layout.routes().size() == 2);
  const SkipRoute& a = layout.route(layout.find({nn::Namespace::default_namespace(), "a"}));
  REQUIRE(a.stash_stage == 0);
  REQUIRE(a.pop_stage == 2);
  REQUIRE(a.str() == "'a' from stage 0 (child 1, Stash(a, tanh)) to stage 2 (child 5, Pop(a, mul))");
  REQUIRE(layout.portals_out(0).size() == 1);
  REQUIRE(layout.portals_out(1).size() == 1);
  REQUIRE(layout.portals_in(1).empty());
  REQUIRE(layout.portals_in(2).size() == 2);
  SkipLayout one(model, {9});
  REQUIRE(one.route(0).local());
  REQUIRE(one.portals_in(0).empty());
  REQUIRE(one.portals_out(0).empty());
}

TEST_CASE("Pipe::forward with skips equals the plain model") {
  const std::vector<int> balance = GENERATE(from_range(kBalances));
  const int chunks = GENERATE(1, 3, 4);
  const Checkpoint mode =
      GENERATE(Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever);
  CAPTURE(balance, chunks, to_string(mode));

  nn::Sequential plain = skip_model(3);
  Pipe pipe(skip_model(3), {.balance = balance,
                            .devices = cpus(0, static_cast<int>(balance.size())),
                            .chunks = chunks,
                            .schedule = {.recompute = mode}});
  const Tensor x0 = randn({7, 4}, 4);
  const Tensor target = randn({7, 3}, 5);
  PlainRun ref = plain_model_run(plain, x0, target);

  Tensor x = x0.clone().set_requires_grad(true);
  Tensor out = pipe.forward(x);
  Tensor loss = mse(out, target.to(out.device()));
  loss.backward();
  REQUIRE(max_diff(out, ref.out) <= kTol);
  REQUIRE(std::abs(loss.item() - ref.loss.item()) <= kTol);
  REQUIRE(max_diff(x.grad(), ref.input_grad) <= kTol);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
  // Each cell ran once forward, once backward (plus a recompute when checkpointed).
  const StepCounters c = pipe.last_counters();
  const int m = std::min(chunks, 7);
  for (size_t s = 0; s < balance.size(); ++s) REQUIRE(c.backwards[s] == m);
}

TEST_CASE("train_step with skips equals the plain model under every schedule") {
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "zb-h1", "zb-h2");
  const std::vector<int> balance =
      GENERATE(values<std::vector<int>>({{6, 3}, {2, 3, 4}, {3, 3, 3}, {1, 2, 2, 4}}));
  const int chunks = GENERATE(1, 4);
  const Checkpoint mode =
      GENERATE(Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever);
  CAPTURE(schedule, balance, chunks, to_string(mode));

  nn::Sequential plain = skip_model(6);
  Pipe pipe(skip_model(6), {.balance = balance,
                            .devices = cpus(4, static_cast<int>(balance.size())),
                            .chunks = chunks,
                            .schedule = {.name = schedule, .recompute = mode}});
  const Tensor x0 = randn({8, 4}, 7);
  const Tensor target = randn({8, 3}, 8);
  check_train_step_equals_plain(pipe, plain, x0, target);
}

TEST_CASE("interleaved 1F1B with skips between virtual stages equals the plain model") {
  const int chunks = GENERATE(2, 4);
  CAPTURE(chunks);
  nn::Sequential plain = skip_model(9);
  // Stages 0 {0,1} and 2 {5,6} on worker 0; 1 {2,3,4} and 3 {7,8} on worker 1:
  // 'a' goes 0 -> 2 (worker 0 to itself), 'b' 1 -> 3 (worker 1 to itself).
  Pipe pipe(skip_model(9), {.balance = {2, 3, 2, 2},
                            .devices = cpus(10, 2),
                            .chunks = chunks,
                            .schedule = {.name = "interleaved-1f1b", .virtual_stages = 2}});
  const Tensor x0 = randn({8, 4}, 10), target = randn({8, 3}, 11);
  check_train_step_equals_plain(pipe, plain, x0, target);
}

TEST_CASE("skips and several steps: gradients accumulate, eval and no-grad forwards work") {
  nn::Sequential plain = skip_model(12);
  Pipe pipe(skip_model(12), {.balance = {2, 3, 4}, .devices = cpus(0, 3), .chunks = 2});
  for (int step = 0; step < 3; ++step) {
    const Tensor x = randn({6, 4}, 20 + step), t = randn({6, 3}, 30 + step);
    mse(plain.forward(x), t).backward();
    pipe.train_step(x, t, mse, {.schedule = named_schedule(pipe, x,
                                                           step % 2 == 0 ? "1f1b" : "gpipe")});
  }
  REQUIRE(max_grad_diff(pipe.module(), plain) <= 1e-5);
  const Tensor x = randn({5, 4}, 40);
  pipe.eval();
  plain.eval();
  REQUIRE(max_diff(pipe.forward(x), plain.forward(x)) <= kTol);
  pipe.train();
  autograd::NoGradGuard no_grad;
  REQUIRE(max_diff(pipe.forward(x), plain.forward(x)) <= kTol);
}

// ---- namespaces ----

namespace {
/// A residual block whose skip is always called "r": used twice, it needs isolate().
std::shared_ptr<nn::Sequential> residual_block(int64_t width) {
  return std::make_shared<nn::Sequential>(Stash("r"), nn::Linear(width, width), nn::Tanh(),
                                          Pop("r"));
}

nn::Sequential two_blocks(uint64_t seed, bool isolated) {
  Generator g(seed);
  GeneratorGuard guard(g);
  auto b1 = residual_block(5), b2 = residual_block(5);
  if (isolated) {
    nn::isolate(*b1, nn::Namespace());
    nn::isolate(*b2, nn::Namespace());
  }
  return nn::Sequential(nn::Linear(3, 5), b1, b2, nn::Linear(5, 2));
}
}  // namespace

TEST_CASE("a block used twice needs a namespace per instance") {
  REQUIRE_THROWS_WITH(Pipe(two_blocks(1, false), {.balance = {2, 2}, .devices = cpus(0, 2)}),
                      Catch::Contains("'r' is stashed by 2 layers: child 1 (Stash(r)), child 2 "
                                      "(Stash(r)); give each instance of a block its own "
                                      "namespace"));
  // Isolated, the two skips are distinct, and the pipelined model equals the plain one.
  const std::vector<int> balance = GENERATE(values<std::vector<int>>({{2, 2}, {1, 1, 2}}));
  CAPTURE(balance);
  nn::Sequential plain = two_blocks(2, true);
  Pipe pipe(two_blocks(2, true), {.balance = balance,
                                  .devices = cpus(0, static_cast<int>(balance.size())),
                                  .chunks = 3});
  const Tensor x0 = randn({6, 3}, 3), target = randn({6, 2}, 4);
  PlainRun ref = plain_model_run(plain, x0, target);
  Tensor x = x0.clone().set_requires_grad(true);
  Tensor out = pipe.forward(x);
  mse(out, target.to(out.device())).backward();
  REQUIRE(max_diff(x.grad(), ref.input_grad) <= kTol);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
}

TEST_CASE("a stash and a pop in different namespaces do not match, and the error says so") {
  auto stash = std::make_shared<Stash>("x");
  nn::isolate(*stash, nn::Namespace());
  nn::Sequential model(stash, nn::Linear(2, 2), Pop("x"));
  REQUIRE_THROWS_WITH(
      verify_skippables(model),
      Catch::Contains("'x' is popped by child 2 (Pop(x)) but never stashed ('x' (namespace") &&
          Catch::Contains("is stashed there: put both layers in the same namespace)") &&
          Catch::Contains("but never popped"));
}

// ---- errors ----

TEST_CASE("unmatched skips are refused when the Pipe is built, listing every problem") {
  SECTION("a stash never popped") {
    nn::Sequential m(Stash("x"), nn::Linear(2, 2));
    REQUIRE_THROWS_WITH(Pipe(std::move(m), {.balance = {1, 1}, .devices = cpus(0, 2)}),
                        "skip connections do not match:\n  'x' is stashed by child 0 "
                        "(Stash(x)) but never popped");
  }
  SECTION("a pop never stashed") {
    nn::Sequential m(nn::Linear(2, 2), Pop("y"));
    REQUIRE_THROWS_WITH(Pipe(std::move(m), {.balance = {2}, .devices = cpus(0, 1)}),
                        "skip connections do not match:\n  'y' is popped by child 1 (Pop(y)) "
                        "but never stashed");
  }
  SECTION("a pop before its stash") {
    nn::Sequential m(Pop("z"), nn::Linear(2, 2), Stash("z"));
    REQUIRE_THROWS_WITH(Pipe(std::move(m), {.balance = {1, 2}, .devices = cpus(0, 2)}),
                        Catch::Contains("'z' is popped by child 0 (Pop(z)) before child 2 "
                                        "(Stash(z)) stashes it"));
  }
  SECTION("popped twice, and several problems at once") {
    nn::Sequential m(Stash("p"), Pop("p"), Pop("p"), Stash("q"));
    REQUIRE_THROWS_WITH(verify_skippables(m),
                        Catch::Contains("'p' is popped by 2 layers: child 1 (Pop(p)), child 2 "
                                        "(Pop(p))") &&
                            Catch::Contains("'q' is stashed by child 3 (Stash(q)) but never "
                                            "popped"));
  }
  SECTION("a layer that declares a name twice, or stashes and pops the same name") {
    struct Both : nn::Skippable {
      explicit Both(nn::SkipNames n) : Skippable(std::move(n)) {}
      std::string str() const override { return "Both()"; }
    };
    REQUIRE_THROWS_WITH(Both(nn::SkipNames{.stash = {"a", "a"}}), "Skippable: 'a' is declared twice");
    REQUIRE_THROWS_WITH(Both(nn::SkipNames{.stash = {"a"}, .pop = {"a"}}),
                        Catch::Contains("a layer cannot stash and pop the same name"));
    REQUIRE_THROWS_WITH(Both(nn::SkipNames{.stash = {""}}), "Skippable: a skip name is empty");
  }
}

namespace {
/// Declares a stash of "s" and makes it, unless told to forget.
class ForgetfulStash : public nn::Skippable {
 public:
  explicit ForgetfulStash(std::shared_ptr<std::atomic<bool>> forget)
      : Skippable({.stash = {"s"}}), forget_(std::move(forget)) {}
  using nn::Module::forward;
  Tensor forward(const Tensor& x) override {
    if (!*forget_) stash("s", x);
    return x;
  }
  std::string str() const override { return "ForgetfulStash()"; }

 private:
  std::shared_ptr<std::atomic<bool>> forget_;
};

/// Stashes a name it never declared.
class Undeclared : public nn::Skippable {
 public:
  Undeclared() : Skippable({.stash = {"s"}}) {}
  using nn::Module::forward;
  Tensor forward(const Tensor& x) override {
    stash("t", x);
    return x;
  }
  std::string str() const override { return "Undeclared()"; }
};
}  // namespace

TEST_CASE("a layer that does not stash what it declared fails the step, naming it") {
  auto forget = std::make_shared<std::atomic<bool>>(false);
  const bool same_stage = GENERATE(false, true);
  CAPTURE(same_stage);
  Pipe pipe(nn::Sequential(ForgetfulStash(forget), nn::Linear(2, 2), Pop("s")),
            {.balance = same_stage ? std::vector<int>{3} : std::vector<int>{1, 2},
             .devices = cpus(0, 2),
             .chunks = 2});
  const Tensor x = randn({4, 2}, 1);
  REQUIRE(pipe.forward(x).shape() == Shape{4, 2});
  *forget = true;
  // On one stage the pop comes first and finds nothing; across stages the stashing stage
  // finds, after its forward, that the portal has nothing to send.
  REQUIRE_THROWS_WITH(pipe.forward(x),
                      Catch::Contains(same_stage ? "Pop(s) popped 's' on stage 0, micro-batch 0 "
                                                   "before it was stashed"
                                                 : "ForgetfulStash() did not stash 's' during "
                                                   "the forward of stage 0, micro-batch 0"));
  *forget = false;  // the Pipe stays usable
  REQUIRE(pipe.forward(x).shape() == Shape{4, 2});
  REQUIRE_THROWS_WITH(Pipe(nn::Sequential(Undeclared(), Pop("s")),
                           {.balance = {1, 1}, .devices = cpus(0, 2)})
                          .forward(x),
                      Catch::Contains("Undeclared(): stash of 't', which the layer does not "
                                      "declare"));
}

// ---- deferred BatchNorm ----

TEST_CASE("deferred BatchNorm after a pop sees the whole batch") {
  auto bn = std::make_shared<nn::BatchNorm1d>(6);
  auto model = [](uint64_t seed, std::shared_ptr<nn::BatchNorm1d> norm) {
    Generator g(seed);
    GeneratorGuard guard(g);
    return nn::Sequential(nn::Linear(4, 6), Stash("a"), nn::Linear(6, 6), nn::ReLU(), Pop("a"),
                          norm, nn::Linear(6, 3));
  };
  auto plain_bn = std::make_shared<nn::BatchNorm1d>(6);
  nn::Sequential plain = model(5, plain_bn);
  Pipe pipe(model(5, bn), {.balance = {2, 3, 2},
                           .devices = cpus(0, 3),
                           .chunks = 4,
                           .schedule = {.recompute = Checkpoint::kAlways},
                           .deferred_batch_norm = true});
  const Tensor x = randn({8, 4}, 6), t = randn({8, 3}, 7);
  plain.forward(x);
  pipe.train_step(x, t, mse, {.schedule = named_schedule(pipe, x, "1f1b")});
  REQUIRE(max_diff(bn->running_mean(), plain_bn->running_mean()) < 1e-6);
  REQUIRE(max_diff(bn->running_var(), plain_bn->running_var()) < 1e-5);
}

// ---- memory ----

namespace {
constexpr int64_t I = 8, D = 16;
constexpr int64_t kF = 4;

/// Reads cpu:k's allocated bytes (relative to a base) when its forward runs.
class Probe : public nn::Module {
 public:
  Probe(Device device, std::shared_ptr<std::atomic<int64_t>> seen)
      : device_(device), seen_(std::move(seen)) {}
  using nn::Module::forward;
  Tensor forward(const Tensor& x) override {
    seen_->store(allocator_for(device_).allocated());
    return x;
  }
  std::string str() const override { return "Probe()"; }

 private:
  Device device_;
  std::shared_ptr<std::atomic<int64_t>> seen_;
};
}  // namespace

TEST_CASE("a portal's tensor lives on the popping stage only, and not past the backward") {
  // stage 0 (cpu:60): Linear(I→D) Stash(s)     h = x·W0ᵀ [n,D] is both the output and 's'
  // stage 1 (cpu:61): Linear(D→D) Probe(cpu:62)
  // stage 2 (cpu:62): Pop(s)                    y = h1 + s
  const Checkpoint mode = GENERATE(Checkpoint::kNever, Checkpoint::kAlways);
  const int m = GENERATE(1, 4);
  CAPTURE(to_string(mode), m);
  constexpr int64_t N = 8;
  auto seen = std::make_shared<std::atomic<int64_t>>(-1);
  nn::Sequential model(nn::Linear(I, D, false), Stash("s"), nn::Linear(D, D, false),
                       Probe(Device::cpu(62), seen), Pop("s"));
  Pipe pipe(std::move(model), {.balance = {2, 2, 1},
                               .devices = {Device::cpu(60), Device::cpu(61), Device::cpu(62)},
                               .chunks = m,
                               .schedule = {.recompute = mode}});
  const Tensor x = randn({N, I}, 1, Device::cpu(60));
  Allocator& a0 = allocator_for(Device::cpu(60));
  Allocator& a1 = allocator_for(Device::cpu(61));
  Allocator& a2 = allocator_for(Device::cpu(62));
  const int64_t base0 = a0.allocated(), base1 = a1.allocated(), base2 = a2.allocated();

  Tensor out = pipe.forward(x);
  const int64_t n = N / m;
  if (m == 1) {
    // While stage 1 runs micro-batch 0, stage 2 has not started: its device holds exactly the
    // portal's copy of 's', in flight.
    REQUIRE((seen->load() - base2) / kF == n * D);
  }
  // Stage 1 never held 's': its cells keep their input (saved by the Linear) and their output
  // (the tape's root) when recorded, only the input when checkpointed.
  const bool last_recorded = mode != Checkpoint::kAlways;
  REQUIRE((a1.allocated() - base1) / kF == (mode == Checkpoint::kNever ? N * 2 * D : N * D));
  // Stage 0 keeps h once per micro-batch when recorded ('s' and the output share it), and
  // nothing when checkpointed (its input x is the caller's).
  REQUIRE((a0.allocated() - base0) / kF == (mode == Checkpoint::kNever ? N * D : 0));
  // Stage 2 keeps its inputs h1 and 's' per micro-batch (popped from the portal: one copy),
  // its output y when recorded, and the gathered output.
  REQUIRE((a2.allocated() - base2) / kF == N * 2 * D + (last_recorded ? N * D : 0) + N * D);

  nn::mse_loss(out, Tensor::zeros({N, D}, {.device = Device::cpu(62)})).backward();
  out = Tensor();
  // After the backward nothing stashed is held anywhere: only the parameter gradients remain.
  REQUIRE((a0.allocated() - base0) / kF == D * I);
  REQUIRE((a1.allocated() - base1) / kF == D * D);
  REQUIRE(a2.allocated() == base2);
}

TEST_CASE("the trace shows each portal's copies, straight from stage to stage") {
  Pipe pipe(skip_model(13), {.balance = {2, 3, 4}, .devices = cpus(0, 3), .chunks = 2});
  const Tensor x = randn({6, 4}, 1), t = randn({6, 3}, 2);
  const StepResult r = pipe.train_step(x, t, mse, {.schedule = named_schedule(pipe, x, "1f1b")});
  REQUIRE(r.schedule.skips == std::vector<SkipEdge>{{0, 2}, {1, 2}});
  std::vector<std::string> portals;
  for (const TraceTransfer& tr : r.trace.transfers()) {
    if (tr.skip.empty()) {
      REQUIRE(std::abs(tr.to_stage - tr.from_stage) == 1);  // neighbours only
      continue;
    }
    portals.push_back(tr.name());
    REQUIRE(tr.bytes == 3 * 6 * 4);  // one [3, 6] float32 tensor per micro-batch
    REQUIRE(tr.worker == tr.from_stage);
    REQUIRE(tr.end_us >= tr.start_us);
  }
  std::sort(portals.begin(), portals.end());
  REQUIRE(portals == std::vector<std::string>{
                         "portal 'a' 0->2 mb 0", "portal 'a' 0->2 mb 1", "portal 'b' 1->2 mb 0",
                         "portal 'b' 1->2 mb 1", "portal grad 'a' 2->0 mb 0",
                         "portal grad 'a' 2->0 mb 1", "portal grad 'b' 2->1 mb 0",
                         "portal grad 'b' 2->1 mb 1"});
  REQUIRE_THAT(r.trace.to_chrome_json(), Catch::Contains("\"portal 'a' 0->2 mb 1\""));
}

TEST_CASE("skips under the V-shaped and interleaved zero-bubble schedules") {
  const std::string schedule = GENERATE(as<std::string>{}, "zb-v", "dualpipev", "interleaved-zb");
  const Checkpoint mode = GENERATE(Checkpoint::kExceptLast, Checkpoint::kNever);
  CAPTURE(schedule, to_string(mode));
  nn::Sequential plain = skip_model(14);
  // Stages {0,1} {2,3,4} {5,6} {7,8}: 'a' 0 -> 2, 'b' 1 -> 3; under the V, stage 0 and 3 are
  // worker 0's, so 'b' goes from worker 1 to worker 0 and 'a' from worker 0 to worker 1.
  Pipe pipe(skip_model(14), {.balance = {2, 3, 2, 2},
                             .devices = cpus(30, 2),
                             .chunks = 4,
                             .schedule = {.name = schedule, .virtual_stages = 2,
                                          .recompute = mode}});
  const Tensor x0 = randn({8, 4}, 15), target = randn({8, 3}, 16);
  check_train_step_equals_plain(pipe, plain, x0, target);
}

TEST_CASE("each new namespace takes the next id, and isolating reuses the given one") {
  nn::Namespace a, b;
  REQUIRE(b.id() == a.id() + 1);
  Stash s("x");
  s.isolate(a);
  s.isolate(b);  // re-isolating must not consume ids
  nn::Namespace c;
  REQUIRE(c.id() == b.id() + 1);
  REQUIRE(s.key("x").ns == b);
}
