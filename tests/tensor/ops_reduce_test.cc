// Reductions against naive loops over every dim of a rank-3 tensor.
#include <catch2/catch.hpp>
#include <cmath>

#include "tensor/ops.h"
#include "tensor/threads.h"
#include "tests/compare.h"
#include "tests/tensor/test_util.h"

using namespace pipewright;
using namespace pipewright::testing;

namespace {

enum class Kind { kSum, kMean, kMax, kArgmax };

/// Naive reduction of `x` (shape `dims`, row-major) over dimension `d`.
std::vector<double> naive_reduce(const std::vector<double>& x, const std::vector<int64_t>& dims,
                                 int64_t d, Kind kind) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= dims[i];
  for (size_t i = d + 1; i < dims.size(); ++i) inner *= dims[i];
  const int64_t n = dims[d];
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      double acc = kind == Kind::kMax || kind == Kind::kArgmax ? -INFINITY : 0.0;
      int64_t best = 0;
      for (int64_t k = 0; k < n; ++k) {
        const double v = x[(o * n + k) * inner + j];
        if (kind == Kind::kSum || kind == Kind::kMean) {
          acc += v;
        } else if (v > acc) {
          acc = v;
          best = k;
        }
      }
      if (kind == Kind::kMean) acc /= static_cast<double>(n);
      out.push_back(kind == Kind::kArgmax ? static_cast<double>(best) : acc);
    }
  }
  return out;
}

}  // namespace

TEMPLATE_TEST_CASE("sum, mean, max, argmax over each dim", "[reduce]", float, double) {
  for (const Shape& shape : {Shape{3, 4, 5}, Shape{2, 40000, 1}, Shape{1, 3, 20000}}) {
    const auto xv = random_values(shape.numel(), 11);
    const auto xr = rounded<TestType>(xv);
    const Tensor x = tensor_of<TestType>(xv, shape);
    for (int64_t d = 0; d < 3; ++d) {
      INFO("shape " << shape << " dim " << d);
      std::vector<int64_t> kept = shape.dims(), dropped;
      kept[d] = 1;
      for (int64_t i = 0; i < 3; ++i) {
        if (i != d) dropped.push_back(shape[i]);
      }
      const Tensor s = ops::sum(x, d), m = ops::mean(x, d - 3), mx = ops::max(x, d, true);
      const Tensor am = ops::argmax(x, d);
      REQUIRE(s.shape() == Shape(dropped));
      REQUIRE(mx.shape() == Shape(kept));
      REQUIRE(am.dtype() == DType::kInt64);
      const double tol = tolerance<TestType>() * 10;  // long sums in float32 round more
      REQUIRE(max_rel_err(s.template to_vector<double>(),
                          naive_reduce(xr, shape.dims(), d, Kind::kSum)) < tol);
      REQUIRE(max_rel_err(m.template to_vector<double>(),
                          naive_reduce(xr, shape.dims(), d, Kind::kMean)) < tol);
      REQUIRE(equal_values(mx.template to_vector<double>(),
                           naive_reduce(xr, shape.dims(), d, Kind::kMax)));
      REQUIRE(equal_values(am.template to_vector<double>(),
                           naive_reduce(xr, shape.dims(), d, Kind::kArgmax)));
    }
  }
}

TEMPLATE_TEST_CASE("sum and mean over all elements", "[reduce]", float, double) {
  const int64_t n = 1 << 20;  // many blocks: the parallel, block-wise path
  const auto xv = random_values(n, 12, 0.0, 1.0);
  const auto xr = rounded<TestType>(xv);
  const Tensor x = tensor_of<TestType>(xv, {1024, 1024});
  double expected = 0.0;
  for (double v : xr) expected += v;
  const Tensor s = ops::sum(x);
  REQUIRE(s.dim() == 0);
  REQUIRE(std::fabs(s.item() - expected) / expected < tolerance<TestType>() * 10);
  REQUIRE(std::fabs(ops::mean(x).item() - expected / n) < tolerance<TestType>() * 10);
}

TEMPLATE_TEST_CASE("add_norm_share_ adds the float64 of sum(square(x)) or sum(abs(x))", "[reduce]",
                   float, double) {
  // A strided view and a long tensor (the blocked, parallel sum): the unfused ops' bits.
  const Tensor long_x = random_tensor<TestType>({1 << 20}, 14, -2.0, 2.0);
  const Tensor view = transposed_view(random_tensor<TestType>({37, 5}, 15, -2.0, 2.0));
  for (const Tensor& x : {long_x, view}) {
    for (const double p : {1.0, 2.0}) {
      Tensor total = Tensor::full({1}, 0.5, {.dtype = DType::kFloat64});
      ops::add_norm_share_(total, x, p);
      const Tensor terms = p == 2.0 ? ops::square(x) : ops::abs(x);
      CHECK(total.to_vector<double>()[0] == 0.5 + static_cast<double>(ops::sum(terms).item()));
      // Against the float64 sum of the rounded terms.
      double reference = 0.5;
      for (double v : terms.to(DType::kFloat64).to_vector<double>()) reference += v;
      CHECK(std::fabs(total.to_vector<double>()[0] - reference) <=
            tolerance<TestType>() * 10 * reference);
    }
  }
  Tensor total = Tensor::zeros({1}, {.dtype = DType::kFloat64});
  ops::add_norm_share_(total, Tensor::empty({0, 3}, {.dtype = DType::kFloat32}), 2.0);
  CHECK(total.to_vector<double>()[0] == 0.0);
  CHECK_THROWS_WITH(ops::add_norm_share_(total, long_x, 3.0), Catch::Contains("p must be 1 or 2"));
  Tensor two = Tensor::zeros({2}, {.dtype = DType::kFloat64});
  CHECK_THROWS_WITH(ops::add_norm_share_(two, long_x, 2.0),
                    Catch::Contains("total must be float64 with one element on cpu"));
  Tensor narrow = Tensor::zeros({1}, {.dtype = DType::kFloat32});
  CHECK_THROWS_WITH(ops::add_norm_share_(narrow, long_x, 1.0), Catch::Contains("[1] float32"));
}

TEST_CASE("sums do not depend on the thread count") {
  const Tensor x = random_tensor<float>({3, 1 << 19}, 13);
  Tensor with_one, with_all;
  {
    ThreadBudgetGuard one(1);
    with_one = ops::sum(x, 1);
  }
  with_all = ops::sum(x, 1);
  REQUIRE(ops::equal(with_one, with_all));
}

TEST_CASE("argmax returns the first maximum") {
  const Tensor x = Tensor::from_vector<float>({1, 5, 5, 2, 7, 7, 7, 0}, {2, 4});
  REQUIRE(ops::argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  REQUIRE(ops::argmax(x, 0, true).shape() == Shape{1, 4});
}

TEST_CASE("max propagates NaN, as torch.max does, in every layout and block") {
  // A row (contiguous), a long row reduced in blocks by two threads (the NaN in a late block),
  // and a reduction over rows (columns in the inner loop), the NaN first, middle and last.
  const double nan = std::nan("");
  for (int64_t at : {int64_t{0}, int64_t{7}, int64_t{39999}}) {
    std::vector<double> long_row(40000);
    for (size_t i = 0; i < long_row.size(); ++i) long_row[i] = static_cast<double>(i % 97);
    long_row[static_cast<size_t>(at)] = nan;
    const Tensor x = Tensor::from_vector(long_row, {1, 40000});
    CHECK(std::isnan(ops::max(x, 1).to_vector<double>()[0]));
    CHECK(std::isnan(ops::max(x.reshape({40000, 1}), 0).to_vector<double>()[0]));
  }
  const Tensor m = Tensor::from_vector(std::vector<double>{1, nan, 3, 4, 5, 6}, {3, 2});
  const std::vector<double> over_rows = ops::max(m, 0).to_vector<double>();  // {5, NaN}
  CHECK(over_rows[0] == 5.0);
  CHECK(std::isnan(over_rows[1]));
  const std::vector<double> over_cols = ops::max(m, 1).to_vector<double>();  // {NaN, 4, 6}
  CHECK(std::isnan(over_cols[0]));
  CHECK(over_cols[1] == 4.0);
  CHECK(over_cols[2] == 6.0);
  CHECK(std::isnan(ops::max(m.to(DType::kFloat32), 1).to_vector<float>()[0]));
  // argmax: NaN is the maximum, the first NaN wins (torch.argmax).
  const Tensor a = Tensor::from_vector(std::vector<double>{1, nan, 9, nan, 3, 9, 2, 1}, {2, 4});
  CHECK(ops::argmax(a, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(ops::argmax(a, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 0});
}

TEST_CASE("reductions over an empty dim, and errors") {
  const Tensor e = Tensor::zeros({2, 0});
  REQUIRE(ops::sum(e, 1).to_vector<float>() == std::vector<float>{0, 0});
  REQUIRE(std::isnan(ops::mean(e, 1).to_vector<float>()[0]));
  REQUIRE(ops::sum(Tensor::zeros({0, 3}), 0).to_vector<float>() == std::vector<float>{0, 0, 0});
  REQUIRE_THROWS_WITH(ops::max(e, 1), Catch::Contains("empty") && Catch::Contains("[2, 0]"));
  REQUIRE_THROWS_AS(ops::argmax(e, 1), std::invalid_argument);
  REQUIRE_THROWS_AS(ops::sum(Tensor::zeros({2, 3}), 2), std::out_of_range);
  REQUIRE_THROWS_WITH(ops::mean(Tensor::zeros({2, 3}), -3),
                      Catch::Contains("dim -3") && Catch::Contains("rank 2"));
  REQUIRE_THROWS_WITH(ops::sum(Tensor::zeros({2}, {DType::kInt64})), Catch::Contains("int64"));
}
