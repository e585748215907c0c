#include <catch2/catch.hpp>

#include "tensor/shape.h"

using namespace pipewright;

TEST_CASE("Shape basics") {
  const Shape s{256, 784};
  REQUIRE(s.rank() == 2);
  REQUIRE(s.numel() == 256 * 784);
  REQUIRE(s[0] == 256);
  REQUIRE(s[-1] == 784);
  REQUIRE(s[-2] == 256);
  REQUIRE(s.str() == "[256, 784]");
  REQUIRE(Shape{}.numel() == 1);
  REQUIRE(Shape{}.str() == "[]");
  REQUIRE(Shape{3, 0, 2}.numel() == 0);
  REQUIRE(Shape{2, 3} == Shape(std::vector<int64_t>{2, 3}));
  REQUIRE(Shape{2, 3} != Shape{3, 2});
}

TEST_CASE("contiguous strides are row-major") {
  REQUIRE(Shape{2, 3, 4}.contiguous_strides() == std::vector<int64_t>{12, 4, 1});
  REQUIRE(Shape{5}.contiguous_strides() == std::vector<int64_t>{1});
  REQUIRE(Shape{}.contiguous_strides().empty());
}

TEST_CASE("wrap_dim wraps negative dims and names dim and rank when out of range") {
  const Shape s{2, 3};
  REQUIRE(s.wrap_dim(0) == 0);
  REQUIRE(s.wrap_dim(-1) == 1);
  REQUIRE(s.wrap_dim(-2) == 0);
  REQUIRE_THROWS_AS(s.wrap_dim(2), std::out_of_range);
  REQUIRE_THROWS_WITH(s.wrap_dim(2), Catch::Contains("dim 2") && Catch::Contains("rank 2"));
  REQUIRE_THROWS_WITH(s.wrap_dim(-3), Catch::Contains("dim -3") && Catch::Contains("rank 2"));
  REQUIRE_THROWS_AS(s[5], std::out_of_range);
  REQUIRE_THROWS_AS(Shape{}.wrap_dim(0), std::out_of_range);
}

TEST_CASE("at() gives a writable size") {
  Shape s{2, 3};
  s.at(-1) = 7;
  REQUIRE(s == Shape{2, 7});
}
