// softmax / log_softmax and their backward kernels against naive per-row formulas.
#include <catch2/catch.hpp>
#include <cmath>

#include "tensor/kernels.h"
#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

using namespace pipewright;
using namespace pipewright::testing;

namespace {

/// Naive softmax of each row of `cols` values (log-softmax when `log`), in long double.
std::vector<double> naive_softmax(const std::vector<double>& x, int64_t cols, bool log) {
  std::vector<double> out(x.size());
  for (size_t r = 0; r < x.size() / cols; ++r) {
    long double total = 0;
    for (int64_t c = 0; c < cols; ++c) total += std::exp(static_cast<long double>(x[r * cols + c]));
    for (int64_t c = 0; c < cols; ++c) {
      const long double e = std::exp(static_cast<long double>(x[r * cols + c]));
      out[r * cols + c] = static_cast<double>(log ? std::log(e / total) : e / total);
    }
  }
  return out;
}

}  // namespace

TEMPLATE_TEST_CASE("softmax and log_softmax over the last dim", "[softmax]", float, double) {
  for (const Shape& shape : {Shape{4, 10}, Shape{2, 3, 7}, Shape{5}, Shape{2000, 33}}) {
    INFO(shape);
    const auto xv = random_values(shape.numel(), 31, -5.0, 5.0);
    const auto xr = rounded<TestType>(xv);
    const Tensor x = tensor_of<TestType>(xv, shape);
    const Tensor y = ops::softmax(x), ly = ops::log_softmax(x);
    REQUIRE(y.shape() == shape);
    REQUIRE(ly.shape() == shape);
    const int64_t cols = shape[-1];
    REQUIRE(max_rel_err(y.template to_vector<double>(), naive_softmax(xr, cols, false)) <
            tolerance<TestType>());
    REQUIRE(max_rel_err(ly.template to_vector<double>(), naive_softmax(xr, cols, true)) <
            tolerance<TestType>());
  }
}

TEST_CASE("softmax is stable for large inputs") {
  const Tensor x = Tensor::from_vector<float>({1000, 1001, 1002}, {1, 3});
  const auto expected = naive_softmax({0, 1, 2}, 3, false);  // softmax(x + c) == softmax(x)
  REQUIRE(max_rel_err(ops::softmax(x).to_vector<double>(), expected) < 1e-6);
  const auto log_expected = naive_softmax({0, 1, 2}, 3, true);
  REQUIRE(max_rel_err(ops::log_softmax(x).to_vector<double>(), log_expected) < 1e-6);
}

TEMPLATE_TEST_CASE("softmax_backward matches the Jacobian-vector product", "[softmax]", float,
                   double) {
  const int64_t rows = 6, cols = 9;
  const auto xv = random_values(rows * cols, 32, -2.0, 2.0);
  const auto gv = random_values(rows * cols, 33);
  const Tensor x = tensor_of<TestType>(xv, {rows, cols}), g = tensor_of<TestType>(gv, {rows, cols});
  const Kernels& k = kernels_for(DeviceType::kCPU);
  for (bool log : {false, true}) {
    INFO("log=" << log);
    const Tensor y = log ? ops::log_softmax(x) : ops::softmax(x);
    Tensor gx = Tensor::empty({rows, cols}, {x.dtype()});
    k.softmax_backward(g, y, log, gx);
    // Naive: J[i][j] = s_i (δij - s_j) for softmax; δij - s_j for log-softmax (row-wise).
    const auto s = naive_softmax(rounded<TestType>(xv), cols, false);
    const auto gr = rounded<TestType>(gv);
    std::vector<double> expected(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < cols; ++j) {
        double acc = 0.0;
        for (int64_t i = 0; i < cols; ++i) {
          const double delta = i == j ? 1.0 : 0.0;
          const double jac = log ? delta - s[r * cols + j] : s[r * cols + i] * (delta - s[r * cols + j]);
          acc += gr[r * cols + i] * jac;  // (Jᵀ g)_j
        }
        expected[r * cols + j] = acc;
      }
    }
    REQUIRE(max_rel_err(gx.template to_vector<double>(), expected) < tolerance<TestType>());
  }
}

TEST_CASE("softmax rejects rank 0 and integers") {
  REQUIRE_THROWS_WITH(ops::softmax(Tensor::scalar(1)), Catch::Contains("rank"));
  REQUIRE_THROWS_WITH(ops::log_softmax(Tensor::zeros({2}, {DType::kInt64})),
                      Catch::Contains("log_softmax") && Catch::Contains("int64"));
}
