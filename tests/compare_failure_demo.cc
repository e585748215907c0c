// Deliberately failing comparisons of 1,000,000 elements, run by compare_output_test.sh,
// which checks that each fails and prints under 2 KB: a cc_binary, never a test of its own.
#include <catch2/catch.hpp>
#include <vector>

#include "tensor/tensor.h"
#include "tests/compare.h"

using pipewright::Shape;
using pipewright::Tensor;
using pipewright::testing::bitwise_equal;
using pipewright::testing::equal_values;

namespace {

constexpr size_t kN = 1000000;

// i / 4 and, where i % 3 != 0, its negative: 666,666 mismatches, the largest at 999,998.
std::vector<double> ramp(bool flipped) {
  std::vector<double> v(kN);
  for (size_t i = 0; i < kN; ++i) v[i] = (flipped && i % 3 != 0 ? -1.0 : 1.0) * (i / 4.0);
  return v;
}

}  // namespace

TEST_CASE("vectors of 1M elements differing in many places") {
  CHECK(equal_values(ramp(false), ramp(true)));
}

TEST_CASE("vectors of different sizes") {
  std::vector<double> shorter = ramp(false);
  shorter.pop_back();
  CHECK(equal_values(ramp(false), shorter));
}

TEST_CASE("tensors of 1M elements differing in many places") {
  const Shape shape{1000, 1000};
  CHECK(bitwise_equal(Tensor::from_vector(ramp(false), shape),
                      Tensor::from_vector(ramp(true), shape)));
}
