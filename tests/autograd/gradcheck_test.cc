// Every differentiable op and every module, checked against central finite differences in
// float64 (autograd/gradcheck.h). One registration line per op; add yours to kCases.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/gradcheck.h"
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/batch_norm.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/gelu.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/normalization.h"
#include "nn/sequential.h"
#include "nn/transformer.h"
#include "tensor/generator.h"
#include "tensor/masking.h"

namespace pw = pipewright;
namespace ag = pipewright::autograd;
namespace nn = pipewright::nn;
using pw::Shape;
using pw::Tensor;
using V = std::vector<Tensor>;

namespace {

constexpr pw::TensorOptions kF64{.dtype = pw::DType::kFloat64};

/// A float64 leaf requiring grad, uniform in [lo, hi), from a fixed stream (each call differs).
Tensor rnd(const Shape& shape, double lo = -1.0, double hi = 1.0) {
  static pw::Generator generator(1234);
  Tensor t = Tensor::empty(shape, kF64);
  generator.uniform_(t, lo, hi);
  t.set_requires_grad(true);
  return t;
}
/// Values in [0.5, 2): away from the singularities of log, sqrt and div.
Tensor pos(const Shape& shape) { return rnd(shape, 0.5, 2.0); }
/// A float64 constant (no grad).
Tensor cst(const Shape& shape) { return rnd(shape).detach(); }
Tensor labels(const std::vector<int64_t>& v) { return Tensor::from_vector(v); }

struct Case {
  std::string name;
  ag::GradcheckFn fn;
  V inputs;
  ag::GradcheckOptions options = {};
};

/// A module case: checks the input x and every parameter of `m`; `extra` are further inputs
/// (a loss's target), passed after x.
template <class M>
Case module_case(std::string name, std::shared_ptr<M> m, Tensor x, V extra = {}) {
  V inputs{x};
  inputs.insert(inputs.end(), extra.begin(), extra.end());
  for (const Tensor& p : m->parameters()) inputs.push_back(p);
  const size_t n_args = 1 + extra.size();
  return {name, [m, n_args](const V& v) { return m->forward(V(v.begin(), v.begin() + n_args))[0]; },
          inputs};
}

/// Runs `fn` with a fresh Generator(seed) installed, so a random module draws the same
/// numbers at every evaluation.
ag::GradcheckFn with_seed(uint64_t seed, ag::GradcheckFn fn) {
  return [seed, fn](const V& v) {
    pw::Generator generator(seed);
    pw::GeneratorGuard guard(generator);
    return fn(v);
  };
}

template <class M, class... Args>
std::shared_ptr<M> make64(Args&&... args) {
  return std::make_shared<M>(std::forward<Args>(args)..., kF64);
}

std::shared_ptr<nn::BatchNorm1d> bn_eval(int64_t c) {
  auto bn = std::make_shared<nn::BatchNorm1d>(c, 1e-5, 0.1, true, true, kF64);
  Tensor rm = bn->running_mean(), rv = bn->running_var();
  rm.copy_from(cst(Shape{c}));
  rv.copy_from(pos(Shape{c}).detach());
  bn->eval();
  return bn;
}

}  // namespace

TEST_CASE("gradcheck: every differentiable op and module") {
  using R = ag::Reduction;
  const std::vector<Case> kCases = {
      // ---- elementwise ----
      {"add", [](const V& v) { return ag::add(v[0], v[1]); }, {rnd({3, 4}), rnd({3, 4})}},
      {"add row broadcast", [](const V& v) { return ag::add(v[0], v[1]); }, {rnd({3, 4}), rnd({4})}},
      {"add one-element broadcast", [](const V& v) { return ag::add(v[0], v[1]); }, {rnd({3, 4}), rnd({1})}},
      {"sub", [](const V& v) { return ag::sub(v[0], v[1]); }, {rnd({3, 4}), rnd({3, 4})}},
      {"sub smaller first", [](const V& v) { return ag::sub(v[0], v[1]); }, {rnd({4}), rnd({3, 4})}},
      {"mul", [](const V& v) { return ag::mul(v[0], v[1]); }, {rnd({3, 4}), rnd({3, 4})}},
      {"mul row broadcast", [](const V& v) { return ag::mul(v[0], v[1]); }, {rnd({2, 3, 4}), rnd({3, 4})}},
      {"div", [](const V& v) { return ag::div(v[0], v[1]); }, {rnd({3, 4}), pos({3, 4})}},
      {"div broadcast", [](const V& v) { return ag::div(v[0], v[1]); }, {rnd({3, 4}), pos({4})}},
      {"add scalar", [](const V& v) { return ag::add(v[0], 2.5); }, {rnd({3, 4})}},
      {"mul scalar", [](const V& v) { return ag::mul(v[0], -1.5); }, {rnd({3, 4})}},
      {"neg", [](const V& v) { return ag::neg(v[0]); }, {rnd({3, 4})}},
      {"exp", [](const V& v) { return ag::exp(v[0]); }, {rnd({3, 4})}},
      {"log", [](const V& v) { return ag::log(v[0]); }, {pos({3, 4})}},
      {"sqrt", [](const V& v) { return ag::sqrt(v[0]); }, {pos({3, 4})}},
      {"square", [](const V& v) { return ag::square(v[0]); }, {rnd({3, 4})}},
      {"tanh", [](const V& v) { return ag::tanh(v[0]); }, {rnd({3, 4})}},
      {"sigmoid", [](const V& v) { return ag::sigmoid(v[0]); }, {rnd({3, 4})}},
      {"relu", [](const V& v) { return ag::relu(v[0]); }, {rnd({3, 4})}},
      {"same input twice", [](const V& v) { return ag::mul(v[0], v[0]); }, {rnd({3, 4})}},
      // ---- linear algebra ----
      {"matmul", [](const V& v) { return ag::matmul(v[0], v[1]); }, {rnd({3, 4}), rnd({4, 5})}},
      {"matmul aT", [](const V& v) { return ag::matmul(v[0], v[1], true, false); }, {rnd({4, 3}), rnd({4, 5})}},
      {"matmul bT", [](const V& v) { return ag::matmul(v[0], v[1], false, true); }, {rnd({3, 4}), rnd({5, 4})}},
      {"matmul aT bT", [](const V& v) { return ag::matmul(v[0], v[1], true, true); }, {rnd({4, 3}), rnd({5, 4})}},
      {"linear", [](const V& v) { return ag::linear(v[0], v[1], v[2]); }, {rnd({5, 3}), rnd({4, 3}), rnd({4})}},
      {"linear no bias", [](const V& v) { return ag::linear(v[0], v[1]); }, {rnd({5, 3}), rnd({4, 3})}},
      {"linear 3-D input", [](const V& v) { return ag::linear(v[0], v[1], v[2]); }, {rnd({2, 5, 3}), rnd({4, 3}), rnd({4})}},
      // ---- reductions ----
      {"sum", [](const V& v) { return ag::sum(v[0]); }, {rnd({3, 4})}},
      {"sum dim 0", [](const V& v) { return ag::sum(v[0], 0); }, {rnd({3, 4})}},
      {"sum dim -1 keepdim", [](const V& v) { return ag::sum(v[0], -1, true); }, {rnd({3, 4})}},
      {"sum middle dim", [](const V& v) { return ag::sum(v[0], 1); }, {rnd({2, 3, 4})}},
      {"mean", [](const V& v) { return ag::mean(v[0]); }, {rnd({3, 4})}},
      {"mean dim 1", [](const V& v) { return ag::mean(v[0], 1); }, {rnd({2, 3, 4})}},
      // ---- shapes ----
      {"reshape", [](const V& v) { return ag::reshape(v[0], Shape{4, -1}); }, {rnd({2, 3, 4})}},
      {"flatten", [](const V& v) { return ag::flatten(v[0]); }, {rnd({2, 3, 4})}},
      {"slice", [](const V& v) { return ag::slice(v[0], 1, 3); }, {rnd({4, 3})}},
      {"chunk (one chunk unused)", [](const V& v) { auto c = ag::chunk(v[0], 3); return ag::cat({ag::mul(c[0], 2.0), c[2]}); }, {rnd({7, 3})}},
      {"cat", [](const V& v) { return ag::cat({v[0], v[1]}); }, {rnd({2, 3}), rnd({3, 3})}},
      {"to device", [](const V& v) { return ag::to(v[0], pw::Device::cpu(3)); }, {rnd({2, 3})}},
      // ---- softmax ----
      {"softmax", [](const V& v) { return ag::softmax(v[0]); }, {rnd({3, 5})}},
      {"log_softmax", [](const V& v) { return ag::log_softmax(v[0]); }, {rnd({3, 5})}},
      {"log_softmax 3-D", [](const V& v) { return ag::log_softmax(v[0]); }, {rnd({2, 3, 5})}},
      // ---- normalisation, dropout ----
      {"batch_norm_train", [](const V& v) { return ag::batch_norm_train(v[0], v[1], v[2], 1e-5); }, {rnd({6, 3}), pos({3}), rnd({3})}},
      {"batch_norm_train (N,C,L)", [](const V& v) { return ag::batch_norm_train(v[0], v[1], v[2], 1e-5); }, {rnd({3, 2, 4}), pos({2}), rnd({2})}},
      {"batch_norm_train no affine", [](const V& v) { return ag::batch_norm_train(v[0], Tensor(), Tensor(), 1e-5); }, {rnd({5, 3})}},
      {"batch_norm_eval", [](const V& v) { return ag::batch_norm_eval(v[0], v[1], v[2], v[3], v[4], 1e-5); }, {rnd({3, 2, 4}), pos({2}), rnd({2}), cst({2}), pos({2}).detach()}},
      {"dropout", [](const V& v) { return ag::dropout(v[0], 0.4, 99, 8); }, {rnd({5, 6})}},
      // ---- views, batched products, masks (attention) ----
      {"transpose", [](const V& v) { return ag::transpose(v[0], 0, 2); }, {rnd({2, 3, 4})}},
      {"permute", [](const V& v) { return ag::permute(v[0], {1, 2, 0}); }, {rnd({2, 3, 4})}},
      {"contiguous of a view", [](const V& v) { return ag::mul(ag::contiguous(ag::transpose(v[0], 0, 1)), 2.0); }, {rnd({3, 4})}},
      {"batched_matmul", [](const V& v) { return ag::batched_matmul(v[0], v[1]); }, {rnd({2, 3, 4}), rnd({2, 4, 2})}},
      {"batched_matmul transposed", [](const V& v) { return ag::batched_matmul(v[0], v[1], true, true); }, {rnd({2, 4, 3}), rnd({2, 2, 4})}},
      {"batched_matmul broadcast", [](const V& v) { return ag::batched_matmul(v[0], v[1]); }, {rnd({2, 1, 3, 4}), rnd({3, 4, 2})}},
      {"batched_matmul shared matrix", [](const V& v) { return ag::batched_matmul(v[0], v[1], false, true); }, {rnd({3, 2, 4}), rnd({5, 4})}},
      {"masked_fill", [](const V& v) { return ag::masked_fill(v[0], pw::ops::causal_mask(3), 0.5); }, {rnd({2, 3, 3})}},
      {"causal_softmax", [](const V& v) { return ag::causal_softmax(v[0], 0.7); }, {rnd({2, 4, 4})}},
      {"causal_softmax keys != queries", [](const V& v) { return ag::causal_softmax(v[0], 1.3); }, {rnd({3, 5})}},
      {"scaled_dot_product_attention causal", [](const V& v) { return ag::scaled_dot_product_attention(v[0], v[1], v[2]); }, {rnd({2, 3, 5, 4}), rnd({2, 3, 5, 4}), rnd({2, 3, 5, 4})}},
      {"scaled_dot_product_attention keys != queries", [](const V& v) { return ag::scaled_dot_product_attention(v[0], v[1], v[2], false, 0.8); }, {rnd({2, 4, 3}), rnd({2, 6, 3}), rnd({2, 6, 3})}},
      {"scaled_dot_product_attention causal, more keys", [](const V& v) { return ag::scaled_dot_product_attention(v[0], v[1], v[2], true, 0.8); }, {rnd({1, 4, 3}), rnd({1, 6, 3}), rnd({1, 6, 3})}},
      // 130 rows: three of the CPU kernel's 64-row tiles each way, the diagonal inside tiles.
      {"scaled_dot_product_attention across tiles", [](const V& v) { return ag::scaled_dot_product_attention(v[0], v[1], v[2]); }, {rnd({1, 130, 2}), rnd({1, 130, 2}), rnd({1, 130, 2})}},
      // ---- transformer layers' ops ----
      {"erf", [](const V& v) { return ag::erf(v[0]); }, {rnd({3, 4}, -2, 2)}},
      {"gelu", [](const V& v) { return ag::gelu(v[0]); }, {rnd({3, 4}, -3, 3)}},
      {"gelu tanh", [](const V& v) { return ag::gelu(v[0], true); }, {rnd({3, 4}, -3, 3)}},
      {"layer_norm", [](const V& v) { return ag::layer_norm(v[0], v[1], v[2]); }, {rnd({2, 3, 5}), pos({5}), rnd({5})}},
      {"layer_norm no affine", [](const V& v) { return ag::layer_norm(v[0], Tensor(), Tensor()); }, {rnd({4, 5})}},
      {"rms_norm", [](const V& v) { return ag::rms_norm(v[0], v[1], 1e-6); }, {rnd({2, 3, 5}), pos({5})}},
      {"embedding", [](const V& v) { return ag::embedding(v[0], v[1]); }, {labels({2, 0, 2, 3}), rnd({4, 3})}},
      // (padding_idx withholds its row's gradient on purpose, as torch does: tests/nn.)
      {"embedding 2-D indices", [](const V& v) { return ag::embedding(v[0], v[1]); }, {Tensor::from_vector<int64_t>({1, 0, 2, 1, 1, 3}, Shape{2, 3}), rnd({4, 3})}},
      // ---- losses ----
      {"mse_loss mean", [](const V& v) { return ag::mse_loss(v[0], v[1]); }, {rnd({4, 3}), rnd({4, 3})}},
      {"mse_loss sum", [](const V& v) { return ag::mse_loss(v[0], v[1], R::kSum); }, {rnd({4, 3}), rnd({4, 3})}},
      {"mse_loss none", [](const V& v) { return ag::mse_loss(v[0], v[1], R::kNone); }, {rnd({4, 3}), rnd({4, 3})}},
      {"cross_entropy mean", [](const V& v) { return ag::cross_entropy(v[0], v[1]); }, {rnd({4, 5}), labels({0, 4, 2, 2})}},
      {"cross_entropy sum", [](const V& v) { return ag::cross_entropy(v[0], v[1], R::kSum); }, {rnd({4, 5}), labels({1, 3, 0, 2})}},
      {"cross_entropy none", [](const V& v) { return ag::cross_entropy(v[0], v[1], R::kNone); }, {rnd({4, 5}), labels({1, 3, 0, 2})}},
      {"cross_entropy smoothing", [](const V& v) { return ag::cross_entropy(v[0], v[1], R::kMean, 0.2); }, {rnd({4, 5}), labels({1, 3, 0, 2})}},
      // ---- modules ----
      module_case("nn::Linear", make64<nn::Linear>(3, 4, true), rnd({5, 3})),
      module_case("nn::Linear no bias", make64<nn::Linear>(3, 4, false), rnd({5, 3})),
      module_case("nn::BatchNorm1d train", make64<nn::BatchNorm1d>(3, 1e-5, 0.1, true, true), rnd({6, 3})),
      module_case("nn::BatchNorm1d train (N,C,L)", make64<nn::BatchNorm1d>(2, 1e-5, 0.1, true, true), rnd({3, 2, 4})),
      module_case("nn::BatchNorm1d eval", bn_eval(3), rnd({6, 3})),
      module_case("nn::ReLU", std::make_shared<nn::ReLU>(), rnd({3, 4})),
      module_case("nn::Tanh", std::make_shared<nn::Tanh>(), rnd({3, 4})),
      module_case("nn::Sigmoid", std::make_shared<nn::Sigmoid>(), rnd({3, 4})),
      module_case("nn::Flatten", std::make_shared<nn::Flatten>(), rnd({2, 3, 4})),
      [] { Case c = module_case("nn::Dropout", std::make_shared<nn::Dropout>(0.3), rnd({5, 6})); c.fn = with_seed(5, c.fn); return c; }(),
      module_case("nn::MSELoss", std::make_shared<nn::MSELoss>(), rnd({4, 3}), {rnd({4, 3})}),
      module_case("nn::CrossEntropyLoss", std::make_shared<nn::CrossEntropyLoss>(R::kMean, 0.1), rnd({4, 5}), {labels({4, 0, 1, 1})}),
      module_case("nn::Embedding", make64<nn::Embedding>(5, 3, std::nullopt), labels({4, 0, 4, 1})),
      module_case("nn::LayerNorm", make64<nn::LayerNorm>(5, 1e-5, true, true), rnd({2, 3, 5})),
      module_case("nn::RMSNorm", make64<nn::RMSNorm>(5, 1e-6, true), rnd({2, 5})),
      module_case("nn::GELU", std::make_shared<nn::GELU>("tanh"), rnd({3, 4})),
      module_case("nn::CausalSelfAttention", make64<nn::CausalSelfAttention>(4, 2, nn::AttentionOptions{}), rnd({2, 3, 4})),
      module_case("nn::CausalSelfAttention fused kernel", make64<nn::CausalSelfAttention>(4, 2, nn::AttentionOptions{.kernel = nn::AttentionKernel::kFused}), rnd({2, 3, 4})),
      module_case("nn::CausalSelfAttention reference kernel", make64<nn::CausalSelfAttention>(4, 2, nn::AttentionOptions{.kernel = nn::AttentionKernel::kReference}), rnd({2, 3, 4})),
      [] { Case c = module_case("nn::CausalSelfAttention dropout", make64<nn::CausalSelfAttention>(4, 2, nn::AttentionOptions{.dropout = 0.3}), rnd({2, 3, 4})); c.fn = with_seed(7, c.fn); return c; }(),
      module_case("nn::TransformerBlock", make64<nn::TransformerBlock>(4, 2, nn::TransformerBlockOptions{.mlp_ratio = 2}), rnd({2, 3, 4})),
      module_case("nn::Sequential MLP", std::make_shared<nn::Sequential>(make64<nn::Linear>(3, 4, true), nn::Tanh(), make64<nn::Linear>(4, 2, true)), rnd({5, 3})),
  };

  for (const Case& c : kCases) {
    DYNAMIC_SECTION(c.name) {
      const ag::GradcheckResult result = ag::gradcheck(c.fn, c.inputs, c.options);
      INFO(c.name << ": " << result.message << " (max error " << result.max_error << ")");
      CHECK(result.checked > 0);
      CHECK(result.ok);
    }
  }
}

TEST_CASE("gradcheck catches a wrong gradient") {
  // d/dx of x·stop_grad(x) is x, not 2x: detach makes the analytic gradient half the truth.
  const ag::GradcheckResult result =
      ag::gradcheck([](const V& v) { return ag::mul(v[0], v[0].detach()); }, {rnd({3})});
  CHECK_FALSE(result.ok);
  CHECK_THAT(result.message, Catch::Matchers::Contains("input 0"));
}

TEST_CASE("gradcheck rejects float32 inputs") {
  Tensor x = Tensor::ones({2});
  x.set_requires_grad(true);
  CHECK_THROWS_AS(ag::gradcheck([](const V& v) { return ag::mul(v[0], 2.0); }, {x}),
                  std::invalid_argument);
}
