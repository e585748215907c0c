// tests/compare.h by value: the exact report of each comparison (counts, first index, largest
// difference and where, NaN, sizes, shapes, dtypes, names) and each semantics' edge cases.
#include "tests/compare.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using namespace pipewright;
using pipewright::testing::all_close;
using pipewright::testing::bitwise_equal;
using pipewright::testing::Comparison;
using pipewright::testing::equal_values;
using pipewright::testing::NamedTensors;

namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("vectors: count, first mismatch, largest difference and where") {
  const std::vector<double> a{0, 1, 2, 3, 4, 5}, b{0, 1.5, 2, 3, -4, 5};
  const Comparison c = equal_values(a, b);
  CHECK_FALSE(c.ok);
  CHECK(c.report ==
        "std::vector<double>: 2 of 6 elements differ (==)\n"
        "  first at 1: a 1, b 1.5\n"
        "  largest |a - b| 8 at 4: a 4, b -4");
  const Comparison same = equal_values(a, a);
  CHECK(same.ok);
  CHECK(same.report == "std::vector<double>: all 6 elements agree (==)");
  CHECK(static_cast<bool>(same));
  CHECK(Catch::Detail::stringify(c) == c.report);  // what CHECK(equal_values(a, b)) prints
}

TEST_CASE("vectors: sizes that differ are named and nothing else is compared") {
  const Comparison c = equal_values(std::vector<float>{1, 2, 3}, std::vector<float>{1, 2, 3, 4});
  CHECK_FALSE(c.ok);
  CHECK(c.report == "std::vector<float>: sizes differ: 3 vs 4 elements");
  CHECK(bitwise_equal(std::vector<int64_t>{}, std::vector<int64_t>{}).ok);
  CHECK(equal_values(std::vector<int64_t>{1}, std::vector<int64_t>{}).report ==
        "std::vector<int64>: sizes differ: 1 vs 0 elements");
}

TEST_CASE("equal_values is ==: NaN never equal, -0 == +0; bitwise_equal compares bits") {
  const std::vector<double> nan{kNan}, zero{0.0}, minus_zero{-0.0};
  CHECK_FALSE(equal_values(nan, nan).ok);
  CHECK(bitwise_equal(nan, nan).ok);  // the same NaN, bit for bit
  CHECK(equal_values(zero, minus_zero).ok);
  const Comparison bits = bitwise_equal(std::vector<float>{0.0f}, std::vector<float>{-0.0f});
  CHECK_FALSE(bits.ok);
  CHECK(bits.report ==
        "std::vector<float>: 1 of 1 elements differ (bitwise)\n"
        "  first at 0: a 0 (0x0), b -0 (0x80000000)\n"
        "  largest |a - b| 0 at 0: a 0 (0x0), b -0 (0x80000000)");
  CHECK(bitwise_equal(std::vector<int64_t>{1, 2}, std::vector<int64_t>{1, 2}).ok);
}

TEST_CASE("mismatches involving NaN are counted, and the largest difference ignores them") {
  const std::vector<double> a{1, kNan, 3, kNan, 5}, b{1, 2, 7, kNan, 5};
  const Comparison c = equal_values(a, b);
  CHECK(c.report ==
        "std::vector<double>: 3 of 5 elements differ (==)\n"
        "  first at 1: a nan, b 2\n"
        "  largest |a - b| 4 at 2: a 3, b 7\n"
        "  2 of the mismatches involve NaN, the first at 1: a nan, b 2");
}

TEST_CASE("all_close: |a - b| <= abs + rel * |b|, NaN never close, equal infinities close") {
  const std::vector<double> b{4, -4, 0};  // bounds 0.5, 0.5, 0.25: met exactly, then passed
  CHECK(all_close(std::vector<double>{4.5, -4.5, 0.25}, b, {.abs = 0.25, .rel = 0.0625}).ok);
  const Comparison over =
      all_close(std::vector<double>{4.5, -4.75, 0.25}, b, {.abs = 0.25, .rel = 0.0625});
  CHECK(over.report ==
        "std::vector<double>: 1 of 3 elements differ\n"
        "  (|a - b| <= 0.25 + 0.0625 * |b|)\n"
        "  first at 1: a -4.75, b -4\n"
        "  largest |a - b| 0.75 at 1: a -4.75, b -4");
  CHECK_FALSE(all_close(std::vector<double>{kNan}, std::vector<double>{kNan}, {.abs = 1}).ok);
  CHECK(all_close(std::vector<double>{kInf, -kInf}, std::vector<double>{kInf, -kInf}, {}).ok);
  CHECK_FALSE(all_close(std::vector<double>{kInf}, std::vector<double>{-kInf}, {.rel = 1}).ok);
  // A passing all_close still reports its largest difference (printed by Catch's -s).
  CHECK(all_close(std::vector<float>{1, 2}, std::vector<float>{1, 2.5f}, {.abs = 1}).report ==
        "std::vector<float>: all 2 elements agree (|a - b| <= 1 + 0 * |b|)\n"
        "  largest |a - b| 0.5 at 1: a 2, b 2.5");
}

TEST_CASE("tensors: dtype, shape, coordinates of the index, any strides and devices") {
  const Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = Tensor::from_vector<float>({1, 2, 3, 4, 9, 6}, {2, 3}, Device::cpu(1));
  const Comparison c = bitwise_equal(a, b);
  CHECK(c.report ==
        "float32 [2, 3]: 1 of 6 elements differ (bitwise)\n"
        "  first at 4 = [1, 1]: a 5 (0x40a00000), b 9 (0x41100000)\n"
        "  largest |a - b| 4 at 4 = [1, 1]: a 5 (0x40a00000), b 9 (0x41100000)");
  CHECK(equal_values(a, a.clone()).report == "float32 [2, 3]: all 6 elements agree (==)");
  CHECK(equal_values(a, a.reshape({3, 2})).report ==
        "shapes differ: a is float32 [2, 3], b is float32 [3, 2]");
  CHECK(equal_values(a, a.to(DType::kFloat64)).report ==
        "dtypes differ: a is float32 [2, 3], b is float64 [2, 3]");
  CHECK(equal_values(a, Tensor()).report == "a is float32 [2, 3], b is undefined");
  CHECK_FALSE(bitwise_equal(Tensor(), Tensor()).ok);  // ops::equal throws on undefined
  // A strided view compares its own elements, row-major.
  const Tensor rows = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2}).slice(1, 3);
  CHECK(equal_values(rows, Tensor::from_vector<double>({3, 4, 5, 6}, {2, 2})).ok);
  // int64 compared as int64: 2^53 + 1 differs from 2^53 although both are 2^53 as double.
  const int64_t big = int64_t{1} << 53;
  CHECK(equal_values(Tensor::from_vector<int64_t>({big}), Tensor::from_vector<int64_t>({big + 1}))
            .report ==
        "int64 [1]: 1 of 1 elements differ (==)\n"
        "  first at 0: a 9007199254740992, b 9007199254740993\n"
        "  largest |a - b| 0 at 0: a 9007199254740992, b 9007199254740993");
  CHECK(all_close(a, b, {.abs = 4}).ok);
}

TEST_CASE("lists: length, names, the first differing entry and up to 4 more") {
  auto t = [](double v) { return Tensor::full({2}, v); };
  NamedTensors a, b;
  for (int i = 0; i < 8; ++i) {
    a.emplace_back("w" + std::to_string(i), t(i));
    b.emplace_back("w" + std::to_string(i), t(i < 2 ? i : -i));
  }
  a.emplace_back("no grad", Tensor());
  b.emplace_back("no grad", Tensor());  // two undefined entries agree
  CHECK(bitwise_equal(a, a).report == "all 9 named tensors agree (bitwise)");
  const Comparison c = equal_values(a, b);
  CHECK(c.report ==
        "6 of 9 named tensors differ (==)\n"
        "  first: entry 2 'w2':\n"
        "    float32 [2]: 2 of 2 elements differ (==)\n"
        "      first at 0: a 2, b -2\n"
        "      largest |a - b| 4 at 0: a 2, b -2\n"
        "  also: entry 3 'w3', entry 4 'w4', entry 5 'w5', entry 6 'w6'\n"
        "    and 1 more");
  NamedTensors renamed = a;
  renamed[1].first = "other";
  CHECK(equal_values(a, renamed).report ==
        "1 of 9 named tensors differ (==)\n"
        "  first: entry 1 'w1':\n"
        "    names differ: 'w1' vs 'other'");
  renamed.pop_back();
  CHECK(equal_values(a, renamed).report ==
        "lists of named tensors differ in length: 9 vs 8 entries");
  const std::vector<Tensor> x{t(1), Tensor()}, y{t(1), t(2)};
  CHECK(bitwise_equal(x, y).report ==
        "1 of 2 tensors differ (bitwise)\n"
        "  first: entry 1:\n"
        "    a is undefined, b is float32 [2]");
  CHECK(all_close(x, x, {}).ok);
}

TEST_CASE("a report stays short however large the data") {
  std::vector<double> a(1000000), b(1000000);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<double>(i) / 7.0;
    b[i] = i % 3 == 0 ? a[i] : -a[i];
  }
  const Comparison c = equal_values(a, b);
  CHECK_FALSE(c.ok);
  CHECK(c.report.size() < 400);
  CHECK(c.report.find("666666 of 1000000 elements differ") != std::string::npos);
  CHECK(c.report.find("first at 1: ") != std::string::npos);
  CHECK(c.report.find("largest |a - b| 285714 at 999998:") != std::string::npos);
}
