// The precision policy (autograd/precision.h, Note [The precision policy]) against references
// computed here in float64 from operands rounded with tensor/half.h: a product's operands and
// output gradient are rounded to 16 bits and its sums are float32; weight gradients accumulate
// unrounded; working copies are made once per scope; layer outputs and their gradients are
// 16-bit values; kFloat32 changes nothing.
#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "autograd/functions.h"
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

using namespace pipewright;
using autograd::Precision;
using autograd::PrecisionScope;

namespace {

Tensor randn(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  GeneratorGuard guard(g);
  return Tensor::randn(shape);
}

/// x's values rounded to `dtype` and back, as doubles (row-major).
std::vector<double> rounded(const Tensor& x, DType dtype) {
  std::vector<double> out;
  for (float v : x.to(dtype).to(DType::kFloat32).to_vector<float>()) out.push_back(v);
  return out;
}

/// C = op(A)·op(B) in float64 for row-major A [M, K] (or [K, M] when ta), B [K, N] (or [N, K]
/// when tb), with the float32 accumulation bound γ_K = K·2^-24 times Σ|terms| per element
/// (Higham, "Accuracy and Stability of Numerical Algorithms", 2002, §3.1).
struct Product {
  std::vector<double> value, bound;
};
Product product(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                int64_t k, int64_t n, bool ta, bool tb) {
  Product p{std::vector<double>(static_cast<size_t>(m * n)),
            std::vector<double>(static_cast<size_t>(m * n))};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double term = a[static_cast<size_t>(ta ? l * m + i : i * k + l)] *
                            b[static_cast<size_t>(tb ? j * k + l : l * n + j)];
        sum += term;
        magnitude += std::abs(term);
      }
      p.value[static_cast<size_t>(i * n + j)] = sum;
      p.bound[static_cast<size_t>(i * n + j)] = static_cast<double>(k) * std::ldexp(1.0, -24) *
                                                    magnitude + 1e-30;
    }
  }
  return p;
}

/// Every element of t within the product's bound of its value (plus `shift` per column).
void check_within(const Tensor& t, const Product& want, const std::vector<double>& shift = {}) {
  const std::vector<float> got = t.to_vector<float>();
  REQUIRE(got.size() == want.value.size());
  const size_t n = shift.empty() ? 1 : shift.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const double expected = want.value[i] + (shift.empty() ? 0.0 : shift[i % n]);
    INFO("element " << i);
    REQUIRE(std::abs(got[i] - expected) <= want.bound[i] + 2 * std::ldexp(std::abs(expected), -24));
  }
}

bool is_16_bit_valued(const Tensor& t, DType dtype) {
  return ops::max_abs_diff(t, t.to(dtype).to(DType::kFloat32)) == 0.0;
}

}  // namespace

TEST_CASE("precision names round-trip and a wrong one is refused") {
  for (Precision p : {Precision::kFloat32, Precision::kBFloat16, Precision::kFloat16}) {
    CHECK(autograd::precision_from_name(autograd::precision_name(p)) == p);
  }
  CHECK(autograd::precision_from_name("bfloat16") == Precision::kBFloat16);
  CHECK(autograd::precision_dtype(Precision::kFloat16) == DType::kFloat16);
  CHECK_THROWS_WITH(autograd::precision_from_name("int8"),
                    Catch::Contains("'int8'") && Catch::Contains("bf16"));
}

TEST_CASE("a linear under bf16 and fp16 multiplies 16-bit operands with float32 sums, and its "
          "gradients are the products of the rounded output gradient") {
  const Precision precision = GENERATE(Precision::kBFloat16, Precision::kFloat16);
  const DType dtype = autograd::precision_dtype(precision);
  CAPTURE(dtype_name(dtype));
  const int64_t rows = 5, in = 37, out = 6;
  Tensor x = randn({rows, in}, 1).set_requires_grad(true);
  Tensor w = randn({out, in}, 2).set_requires_grad(true);
  Tensor b = randn({out}, 3).set_requires_grad(true);
  const Tensor dy = randn({rows, out}, 4);

  Tensor y;
  {
    PrecisionScope scope(precision);
    y = autograd::linear(x, w, b);
  }
  y.backward(dy);  // after the scope: the node keeps what it needs
  REQUIRE(y.dtype() == DType::kFloat32);

  const std::vector<double> x16 = rounded(x, dtype), w16 = rounded(w, dtype),
                            dy16 = rounded(dy, dtype);
  std::vector<double> bias;
  for (float v : b.to_vector<float>()) bias.push_back(v);
  check_within(y, product(x16, w16, rows, in, out, false, true), bias);
  check_within(x.grad(), product(dy16, w16, rows, out, in, false, false));
  check_within(w.grad(), product(dy16, x16, out, rows, in, true, false));
  // db sums the unrounded output gradient.
  const std::vector<float> db = b.grad().to_vector<float>(), dyv = dy.to_vector<float>();
  for (int64_t o = 0; o < out; ++o) {
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r) sum += dyv[static_cast<size_t>(r * out + o)];
    CHECK(std::abs(db[static_cast<size_t>(o)] - sum) <= 1e-5);
  }

  // The same linear in float32 differs by far more than the float32 bound: the rounding ran.
  const Tensor y32 = autograd::linear(x.detach(), w.detach(), b.detach());
  CHECK(ops::max_abs_diff(y, y32) > 1e-3);
}

TEST_CASE("weight gradients accumulate in float32, unrounded, across backward passes") {
  Tensor w = randn({3, 16}, 5).set_requires_grad(true);
  std::vector<Tensor> grads;
  for (uint64_t pass = 0; pass < 3; ++pass) {
    const Tensor x = randn({4, 16}, 10 + pass);
    PrecisionScope scope(Precision::kBFloat16);
    autograd::linear(x, w).backward(randn({4, 3}, 20 + pass));
    grads.push_back(w.grad().clone());
  }
  // Not 16-bit values: nothing rounded the float32 sums.
  CHECK_FALSE(is_16_bit_valued(grads.back(), DType::kBFloat16));
  // Each pass added its product to the float32 .grad.
  CHECK(ops::max_abs_diff(grads[2], grads[1]) > 0.0);
}

TEST_CASE("a scope makes each weight's working copy once; nested scopes restore the policy") {
  autograd::WorkingCopies copies;
  nn::Linear layer(16, 8);
  const Tensor x = randn({2, 16}, 6);
  CHECK(autograd::current_precision() == Precision::kFloat32);
  {
    PrecisionScope scope(Precision::kBFloat16, &copies);
    CHECK(autograd::current_precision() == Precision::kBFloat16);
    const Tensor a = layer.forward(x);
    CHECK(copies.bytes() == 16 * 8 * 2);  // the weight, in bfloat16; not x
    const Tensor b = layer.forward(x);
    CHECK(copies.bytes() == 16 * 8 * 2);
    CHECK(ops::max_abs_diff(a, b) == 0.0);
    const Tensor& first = copies.get(layer.weight(), DType::kBFloat16);
    CHECK(first.is_same(copies.get(layer.weight(), DType::kBFloat16)));
    {
      PrecisionScope inner(Precision::kFloat32);
      CHECK(autograd::current_precision() == Precision::kFloat32);
      // A weight computed by an op is converted afresh, never cached.
      PrecisionScope bf16(Precision::kFloat16, &copies);
      autograd::linear(x, autograd::mul(layer.weight(), 2.0));
      CHECK(copies.bytes() == 16 * 8 * 2);
    }
    CHECK(autograd::current_precision() == Precision::kBFloat16);
  }
  CHECK(autograd::current_precision() == Precision::kFloat32);
  copies.clear();
  CHECK(copies.bytes() == 0);
}

TEST_CASE("round_to_precision rounds a value and its gradient; float32 leaves both alone") {
  Tensor x = Tensor::from_vector(std::vector<float>{1.0f + 1.0f / 512, 3.0f, -1.0f / 3})
                 .set_requires_grad(true);
  {
    PrecisionScope none(Precision::kFloat32);
    CHECK(autograd::round_to_precision(x).is_same(x));
  }
  Tensor y;
  {
    PrecisionScope scope(Precision::kBFloat16);
    y = autograd::round_to_precision(x);
  }
  // bfloat16 keeps 8 significant bits: 1 + 2^-9 is a tie between 1 and 1 + 2^-7 -> 1 (even).
  CHECK(y.to_vector<float>() == std::vector<float>{1.0f, 3.0f, -0.333984375f});
  y.backward(Tensor::from_vector(std::vector<float>{1.0f / 3, 1.0f + 1.0f / 1024, 2.0f}));
  CHECK(x.grad().to_vector<float>() == std::vector<float>{0.333984375f, 1.0f, 2.0f});
}

TEST_CASE("under bf16 every layer of a Sequential hands on 16-bit values, forward and backward") {
  Generator g(7);
  GeneratorGuard guard(g);
  nn::Sequential model;
  model.push_back(nn::Linear(8, 12));
  model.push_back(nn::Tanh());
  model.push_back(nn::Linear(12, 4));
  model.push_back(nn::Tanh());
  Tensor x = randn({3, 8}, 8).set_requires_grad(true);
  Tensor out, out32 = model.forward(x);
  {
    PrecisionScope scope(Precision::kBFloat16);
    out = model.forward(x);
  }
  CHECK(is_16_bit_valued(out, DType::kBFloat16));
  CHECK_FALSE(is_16_bit_valued(out32, DType::kBFloat16));
  CHECK(ops::max_abs_diff(out, out32) < 0.05);  // close to float32's answer
  out.backward(randn({3, 4}, 9));
  // x's gradient is the first Linear's dX: a product of 16-bit values with float32 sums, so
  // generally not a 16-bit value itself; the Tanh's output gradient (rounded) reached it.
  CHECK(x.grad().defined());
}

TEST_CASE("attention's two batched products run in bf16 under the policy") {
  Generator g(11);
  GeneratorGuard guard(g);
  nn::CausalSelfAttention attention(16, 2, {.kernel = nn::AttentionKernel::kFused});
  const Tensor x = randn({2, 5, 16}, 12);
  const Tensor y32 = attention.forward(x);
  Tensor y16;
  {
    PrecisionScope scope(Precision::kBFloat16);
    y16 = attention.forward(x);
  }
  const double diff = ops::max_abs_diff(y16, y32);
  CHECK(diff > 1e-4);  // rounded operands
  CHECK(diff < 0.05);  // yet bf16-close (8 significant bits, three products deep)
}
