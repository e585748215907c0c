// Elementwise ops against naive loops, for float32 and float64, small and large (the large
// sizes run the OpenMP path).
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>

#include "tensor/ops.h"
#include "tests/compare.h"
#include "tests/tensor/test_util.h"

using namespace pipewright;
using namespace pipewright::testing;

namespace {

using BinaryFn = std::function<double(double, double)>;

/// out[i] = f(a[i], b[i % b.size()]): the documented broadcast of the second operand.
std::vector<double> naive_broadcast(const std::vector<double>& a, const std::vector<double>& b,
                                    const BinaryFn& f) {
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = f(a[i], b[i % b.size()]);
  return out;
}

struct NamedBinary {
  const char* name;
  Tensor (*op)(const Tensor&, const Tensor&);
  BinaryFn f;
};

const std::vector<NamedBinary>& binary_ops() {
  static const std::vector<NamedBinary> ops_list = {
      {"add", &ops::add, [](double x, double y) { return x + y; }},
      {"sub", &ops::sub, [](double x, double y) { return x - y; }},
      {"mul", &ops::mul, [](double x, double y) { return x * y; }},
      {"div", &ops::div, [](double x, double y) { return x / y; }},
  };
  return ops_list;
}

}  // namespace

TEMPLATE_TEST_CASE("binary ops with every broadcast form", "[elementwise]", float, double) {
  for (int64_t rows : {3, 5000}) {  // 5000 x 8 = 40000 elements: parallel path
    const Shape big{rows, 8};
    const auto av = random_values(big.numel(), 1, 0.5, 2.0);
    const Tensor a = tensor_of<TestType>(av, big);
    for (const Shape& small : {big, Shape{8}, Shape{1}, Shape{}, Shape{1, 1}}) {
      const auto bv = random_values(small.numel(), 2, 0.5, 2.0);
      const Tensor b = tensor_of<TestType>(bv, small);
      for (const NamedBinary& op : binary_ops()) {
        INFO(op.name << " " << big << " with " << small);
        const Tensor ab = op.op(a, b);
        REQUIRE(ab.shape() == big);
        REQUIRE(max_rel_err(ab.template to_vector<double>(),
                            naive_broadcast(rounded<TestType>(av), rounded<TestType>(bv), op.f)) <
                tolerance<TestType>());
        // The smaller operand first: same broadcast, operands kept in order.
        const Tensor ba = op.op(b, a);
        REQUIRE(ba.shape() == big);
        const BinaryFn swapped = [&](double x, double y) { return op.f(y, x); };
        REQUIRE(max_rel_err(ba.template to_vector<double>(),
                            naive_broadcast(rounded<TestType>(av), rounded<TestType>(bv),
                                            swapped)) < tolerance<TestType>());
      }
    }
  }
}

TEMPLATE_TEST_CASE("scalar ops", "[elementwise]", float, double) {
  const auto av = random_values(50000, 3, 0.5, 2.0);
  const auto ar = rounded<TestType>(av);
  const Tensor a = tensor_of<TestType>(av, {50000});
  const double s = 1.75;
  struct Case {
    Tensor out;
    std::function<double(double)> f;
  };
  const std::vector<Case> cases = {
      {ops::add(a, s), [&](double x) { return x + s; }},
      {ops::sub(a, s), [&](double x) { return x - s; }},
      {ops::mul(a, s), [&](double x) { return x * s; }},
      {ops::div(a, s), [&](double x) { return x / s; }},
      {ops::rsub(a, s), [&](double x) { return s - x; }},
      {ops::rdiv(a, s), [&](double x) { return s / x; }},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    INFO("case " << k);
    std::vector<double> expected;
    for (double x : ar) expected.push_back(cases[k].f(x));
    REQUIRE(max_rel_err(cases[k].out.template to_vector<double>(), expected) <
            tolerance<TestType>());
  }
}

TEMPLATE_TEST_CASE("unary ops match <cmath>", "[elementwise]", float, double) {
  for (int64_t n : {7, 40000}) {
    const auto xv = random_values(n, 4, -3.0, 3.0);
    const auto xr = rounded<TestType>(xv);
    const Tensor x = tensor_of<TestType>(xv, {n});
    const Tensor xpos = ops::abs(x);
    struct Case {
      const char* name;
      Tensor out;
      std::function<double(double)> f;
      bool positive_input;
    };
    const std::vector<Case> cases = {
        {"neg", ops::neg(x), [](double v) { return -v; }, false},
        {"exp", ops::exp(x), [](double v) { return std::exp(v); }, false},
        {"log", ops::log(xpos), [](double v) { return std::log(v); }, true},
        {"sqrt", ops::sqrt(xpos), [](double v) { return std::sqrt(v); }, true},
        {"square", ops::square(x), [](double v) { return v * v; }, false},
        {"abs", xpos, [](double v) { return std::fabs(v); }, false},
        {"tanh", ops::tanh(x), [](double v) { return std::tanh(v); }, false},
        {"sigmoid", ops::sigmoid(x), [](double v) { return 1.0 / (1.0 + std::exp(-v)); }, false},
        {"relu", ops::relu(x), [](double v) { return v > 0 ? v : 0.0; }, false},
    };
    for (const Case& c : cases) {
      INFO(c.name << " n=" << n);
      std::vector<double> expected;
      for (double v : xr) expected.push_back(c.f(c.positive_input ? std::fabs(v) : v));
      REQUIRE(max_rel_err(c.out.template to_vector<double>(), expected) < tolerance<TestType>());
    }
  }
}

TEST_CASE("sigmoid saturates without NaN") {
  const std::vector<float> s =
      ops::sigmoid(Tensor::from_vector<float>({-1000.0f, 1000.0f})).to_vector<float>();
  REQUIRE(s[0] >= 0.0f);
  REQUIRE(s[0] < 1e-30f);
  REQUIRE(s[1] == 1.0f);
}

TEMPLATE_TEST_CASE("relu_backward masks by the output", "[elementwise]", float, double) {
  const auto gv = random_values(100, 5), yv = random_values(100, 6);
  const Tensor out = ops::relu_backward(tensor_of<TestType>(gv, {10, 10}),
                                        ops::relu(tensor_of<TestType>(yv, {10, 10})));
  std::vector<double> expected;
  for (size_t i = 0; i < gv.size(); ++i) expected.push_back(yv[i] > 0 ? gv[i] : 0.0);
  REQUIRE(max_rel_err(out.template to_vector<double>(), rounded<TestType>(expected)) == 0.0);
}

TEMPLATE_TEST_CASE("in-place fill_, add_, mul_", "[elementwise]", float, double) {
  const int64_t n = 40000;
  const auto dv = random_values(n, 7), sv = random_values(n, 8);
  Tensor dst = tensor_of<TestType>(dv, {n});
  const TestType* memory = dst.template data<TestType>();
  ops::add_(dst, tensor_of<TestType>(sv, {200, 200}), 0.5);  // same numel, any shape
  ops::mul_(dst, -2.0);
  REQUIRE(dst.template data<TestType>() == memory);
  std::vector<double> expected;
  const auto dr = rounded<TestType>(dv), sr = rounded<TestType>(sv);
  for (int64_t i = 0; i < n; ++i) expected.push_back((dr[i] + 0.5 * sr[i]) * -2.0);
  REQUIRE(max_rel_err(dst.template to_vector<double>(), expected) < tolerance<TestType>());
  ops::fill_(dst, 3.0);
  REQUIRE(equal_values(dst.template to_vector<double>(), std::vector<double>(n, 3.0)));
}

TEMPLATE_TEST_CASE("mul_ by a tensor broadcasts it over the destination, in place",
                   "[elementwise]", float, double) {
  const auto dv = random_values(12, 9);
  const Shape b_shapes[] = {{3, 4}, {4}, {1}, {}};
  for (const Shape& b_shape : b_shapes) {
    INFO("b " << b_shape.str());
    Tensor dst = tensor_of<TestType>(dv, {3, 4});
    const TestType* memory = dst.template data<TestType>();
    const auto bv = random_values(b_shape.numel(), 10);
    const Tensor b = tensor_of<TestType>(bv, b_shape);
    const Tensor want = ops::mul(dst, b);
    ops::mul_(dst, b);
    REQUIRE(dst.template data<TestType>() == memory);
    REQUIRE(equal_values(dst.template to_vector<double>(), want.template to_vector<double>()));
  }
  Tensor dst = Tensor::zeros({3, 4});
  REQUIRE_THROWS_WITH(ops::mul_(dst, Tensor::zeros({3})),
                      Catch::Contains("mul_: cannot broadcast [3] over the destination"));
  REQUIRE_THROWS_WITH(ops::mul_(dst, Tensor::zeros({2, 3, 4})),
                      Catch::Contains("cannot broadcast [2, 3, 4]"));
  Tensor column = transposed_view(Tensor::zeros({4, 3}));
  REQUIRE_THROWS_WITH(ops::mul_(column, Tensor::zeros({1})), Catch::Contains("not contiguous"));
}

TEST_CASE("elementwise ops accept non-contiguous inputs") {
  const Tensor a = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor at = transposed_view(a);  // [3, 2]: 1 4 / 2 5 / 3 6
  REQUIRE(ops::add(at, Tensor::from_vector<double>({10, 20})).to_vector<double>() ==
          std::vector<double>{11, 24, 12, 25, 13, 26});
  REQUIRE(ops::neg(at).to_vector<double>() == std::vector<double>{-1, -4, -2, -5, -3, -6});
}

TEST_CASE("elementwise errors name both operands") {
  const Tensor a = Tensor::zeros({2, 4});
  REQUIRE_THROWS_AS(ops::add(a, Tensor::zeros({3})), std::invalid_argument);
  REQUIRE_THROWS_WITH(ops::add(a, Tensor::zeros({3})),
                      Catch::Contains("add: cannot broadcast [3] against [2, 4]"));
  REQUIRE_THROWS_WITH(ops::mul(a, Tensor::zeros({4, 2})),
                      Catch::Contains("mul") && Catch::Contains("[4, 2]") &&
                          Catch::Contains("[2, 4]"));
  REQUIRE_THROWS_WITH(ops::sub(a, Tensor::zeros({2, 4}, {DType::kFloat64})),
                      Catch::Contains("[2, 4] float32 on cpu:0") &&
                          Catch::Contains("[2, 4] float64 on cpu:0"));
  REQUIRE_THROWS_WITH(ops::div(a, Tensor::zeros({2, 4}, {DType::kFloat32, Device::cpu(1)})),
                      Catch::Contains("cpu:0") && Catch::Contains("cpu:1"));
  REQUIRE_THROWS_WITH(ops::exp(Tensor::zeros({2}, {DType::kInt64})),
                      Catch::Contains("exp") && Catch::Contains("int64"));
  Tensor dst = Tensor::zeros({3});
  REQUIRE_THROWS_WITH(ops::add_(dst, Tensor::zeros({4})),
                      Catch::Contains("[3]") && Catch::Contains("[4]"));
  REQUIRE_THROWS_WITH(ops::relu_backward(Tensor::zeros({3}), Tensor::zeros({2})),
                      Catch::Contains("[3]") && Catch::Contains("[2]"));
}

TEST_CASE("comparison helpers for tests") {
  const Tensor a = Tensor::from_vector<double>({1.0, 2.0, 3.0});
  const Tensor b = Tensor::from_vector<double>({1.0, 2.5, 2.0}, Device::cpu(1));
  REQUIRE(ops::max_abs_diff(a, b) == 1.0);  // any devices
  REQUIRE(ops::max_abs_diff(a, a.to(DType::kFloat32)) == 0.0);
  REQUIRE(std::isnan(ops::max_abs_diff(a, Tensor::from_vector<double>({1.0, NAN, 3.0}))));
  REQUIRE_THROWS_WITH(ops::max_abs_diff(a, Tensor::zeros({2})),
                      Catch::Contains("[3]") && Catch::Contains("[2]"));

  const Tensor near = Tensor::from_vector<double>({1.0 + 1e-9, 2.0, 3.0 - 1e-9});
  REQUIRE(ops::allclose(a, near));
  REQUIRE_FALSE(ops::allclose(a, b));
  REQUIRE(ops::allclose(a, b, 0.0, 1.0));   // |a - b| <= atol
  REQUIRE(ops::allclose(a, b, 0.5, 0.0));   // |a - b| <= rtol * |b|
  REQUIRE_FALSE(ops::allclose(a, b, 0.4, 0.0));
  REQUIRE_FALSE(ops::allclose(Tensor::full({1}, NAN), Tensor::full({1}, NAN)));

  REQUIRE(ops::equal(a, a.clone()));
  REQUIRE(ops::equal(a, a.to(Device::cpu(2))));
  REQUIRE_FALSE(ops::equal(a, near));
  REQUIRE_FALSE(ops::equal(a, a.to(DType::kFloat32)));  // dtypes differ
  REQUIRE_FALSE(ops::equal(a, a.reshape({3, 1})));      // shapes differ
  REQUIRE(ops::equal(Tensor::zeros({0}), Tensor::zeros({0})));
}
