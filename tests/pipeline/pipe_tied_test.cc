// Tied parameters across stages (PipeOptions::tied_parameters, Note [Tied parameters]): a
// token embedding on the first stage and the LM head on the last are copies of one matrix.
// The reference is the plain model whose head holds the embedding's very tensor (autograd
// sums both uses into one .grad): the pipeline's copies get that gradient, each, to float
// rounding; after many AdamW steps the copies are still bitwise equal; gradients accumulated
// over two steps, the backward through forward()'s output and clip_grad_norm agree too.
#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/linear.h"
#include "autograd/shape_ops.h"
#include "nn/clip_grad.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/normalization.h"
#include "nn/optim.h"
#include "nn/transformer.h"
#include "pipeline/pipe.h"
#include "tensor/generator.h"
#include "tests/compare.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;
using pipewright::testing::bitwise_equal;

namespace {

constexpr int64_t kVocab = 11, kDim = 8, kHeads = 2, kBatch = 4, kSeq = 5;
const std::vector<std::vector<std::string>> kTied = {{"0.weight", "5.weight"}};

/// x [*, C] -> x · weightᵀ [*, V] with `weight` [V, C] given (the plain model passes the
/// embedding's own tensor: one parameter in two places).
class SharedHead : public nn::Module {
 public:
  explicit SharedHead(const Tensor& weight) : weight_(register_parameter("weight", weight)) {}
  using Module::forward;
  Tensor forward(const Tensor& x) override { return autograd::linear(x, weight_); }
  std::string str() const override { return "SharedHead()"; }

 private:
  Tensor weight_;
};

/// Embedding | block | block | block | LayerNorm | head: six children. `shared`: the head uses
/// the embedding's tensor (the plain reference); else its own (the Pipe's copies).
nn::Sequential gpt(bool shared) {
  Generator generator(17);
  GeneratorGuard guard(generator);
  auto embedding = std::make_shared<nn::Embedding>(kVocab, kDim);
  nn::Sequential m;
  m.push_back(embedding);
  for (int i = 0; i < 3; ++i) m.push_back(nn::TransformerBlock(kDim, kHeads));
  m.push_back(nn::LayerNorm(kDim));
  if (shared) {
    m.push_back(SharedHead(embedding->weight()));
  } else {
    m.push_back(nn::Linear(kDim, kVocab, /*bias=*/false));  // its init is replaced by the Pipe
  }
  return m;
}

/// Token ids in [0, kVocab), [kBatch, kSeq] int64.
Tensor tokens(uint64_t seed) {
  Generator g(seed);
  Tensor u = Tensor::empty({kBatch, kSeq});
  g.uniform_(u, 0.0, static_cast<double>(kVocab));
  return u.to(DType::kInt64);
}

/// Cross-entropy of logits [b, T, V] against targets [b, T].
Tensor lm_loss(const Tensor& logits, const Tensor& target) {
  return nn::cross_entropy(autograd::reshape(logits, {target.numel(), kVocab}),
                           autograd::reshape(target, {target.numel()}).to(logits.device()));
}

Tensor grad_of(const nn::Module& m, const std::string& name) {
  for (const auto& [n, p] : m.named_parameters()) {
    if (n == name) return p.grad();
  }
  throw std::invalid_argument("no parameter " + name);
}

Tensor param(const nn::Module& m, const std::string& name) {
  for (const auto& [n, p] : m.named_parameters()) {
    if (n == name) return p;
  }
  throw std::invalid_argument("no parameter " + name);
}

struct Config {
  std::string schedule;
  std::vector<int> balance;
  int workers;
};

Pipe make_pipe(const Config& c, Checkpoint mode = Checkpoint::kNever) {
  return Pipe(gpt(false), {.balance = c.balance,
                           .devices = cpus(0, c.workers),
                           .chunks = 2,
                           .schedule = {.name = c.schedule,
                                        .virtual_stages = c.schedule == "zb-v" ? 2 : 1,
                                        .recompute = mode},
                           .tied_parameters = kTied});
}

/// Every parameter of `pipe` but the head's copy against the plain model's gradient.
double max_tied_grad_diff(const Pipe& pipe, const nn::Sequential& plain) {
  double worst = 0;
  for (const auto& [name, p] : pipe.module().named_parameters()) {
    const Tensor want = grad_of(plain, name == "5.weight" ? "0.weight" : name);
    worst = std::max(worst, max_diff(p.grad(), want) / std::max(1.0, max_abs(want)));
  }
  return worst;
}

}  // namespace

TEST_CASE("tied copies get the plain model's summed gradient", "[pipe][tied]") {
  const Config config = GENERATE(Config{"gpipe", {2, 4}, 2}, Config{"1f1b", {1, 2, 2, 1}, 4},
                                 Config{"zb-v", {1, 2, 2, 1}, 2});
  const Checkpoint mode = GENERATE(Checkpoint::kNever, Checkpoint::kAlways);
  CAPTURE(config.schedule, config.balance, to_string(mode));
  Pipe pipe = make_pipe(config, mode);
  nn::Sequential plain = gpt(true);
  // Built: the head's copy holds the embedding's values.
  REQUIRE(bitwise_equal(param(pipe.module(), "5.weight"), param(plain, "0.weight")));

  const Tensor x = tokens(1), y = tokens(2);
  const double want = lm_loss(plain.forward(x), y).item();
  lm_loss(plain.forward(x), y).backward();
  const StepResult r = pipe.train_step(x, y, lm_loss);
  CHECK(std::abs(r.loss - want) <= 1e-5);
  CHECK(max_tied_grad_diff(pipe, plain) <= 2e-5);
  CHECK(bitwise_equal(grad_of(pipe.module(), "0.weight"), grad_of(pipe.module(), "5.weight")));
}

TEST_CASE("tied copies stay bitwise equal over many AdamW steps; clipping counts them once",
          "[pipe][tied]") {
  const Config config = GENERATE(Config{"1f1b", {2, 4}, 2}, Config{"zb-v", {1, 2, 2, 1}, 2});
  CAPTURE(config.schedule);
  Pipe pipe = make_pipe(config);
  nn::AdamW opt(nn::weight_decay_groups(pipe.parameters(), 0.1), {.lr = 1e-2});
  for (int step = 0; step < 25; ++step) {
    opt.zero_grad();
    pipe.train_step(tokens(10 + step), tokens(50 + step), lm_loss);
    // The plain model's norm counts the shared matrix once.
    nn::Tensors once;
    for (const auto& [name, p] : pipe.module().named_parameters()) {
      if (name != "5.weight") once.push_back(p);
    }
    const double want = nn::total_grad_norm(once);
    CHECK(std::abs(pipe.clip_grad_norm(0.5) - want) <= 1e-5 * want);
    opt.step();
  }
  CHECK(bitwise_equal(param(pipe.module(), "0.weight"), param(pipe.module(), "5.weight")));
  CHECK(bitwise_equal(grad_of(pipe.module(), "0.weight"), grad_of(pipe.module(), "5.weight")));
}

TEST_CASE("tied gradients accumulate over steps and through forward()'s backward",
          "[pipe][tied]") {
  Pipe pipe = make_pipe({"gpipe", {3, 3}, 2});
  nn::Sequential plain = gpt(true);
  for (uint64_t s = 0; s < 2; ++s) {  // two steps, no zero_grad in between
    lm_loss(plain.forward(tokens(20 + s)), tokens(30 + s)).backward();
    if (s == 0) {
      pipe.train_step(tokens(20), tokens(30), lm_loss);
    } else {
      lm_loss(pipe.forward(tokens(21)), tokens(31)).backward();
    }
  }
  CHECK(max_tied_grad_diff(pipe, plain) <= 2e-5);
}

TEST_CASE("tied_parameters that do not fit are refused, naming them", "[pipe][tied]") {
  using Catch::Contains;
  auto build = [](std::vector<std::vector<std::string>> tied) {
    return Pipe(gpt(false), {.balance = {3, 3}, .devices = cpus(0, 2), .tied_parameters = tied});
  };
  CHECK_THROWS_WITH(build({{"0.weight"}}), Contains("fewer than two"));
  CHECK_THROWS_WITH(build({{"0.weight", "9.weight"}}),
                    Contains("'9.weight' is not a parameter of the model"));
  CHECK_THROWS_WITH(build({{"0.weight", "4.weight"}}),
                    Contains("'4.weight' is [8] float32 but '0.weight' is [11, 8] float32"));
  CHECK_THROWS_WITH(build({{"0.weight", "5.weight"}, {"5.weight", "4.weight"}}),
                    Contains("'5.weight' appears twice"));
  // One tensor in two stages on two workers is refused, pointing here.
  CHECK_THROWS_WITH(Pipe(gpt(true), {.balance = {3, 3}, .devices = cpus(0, 2)}),
                    Contains("PipeOptions::tied_parameters"));
}
