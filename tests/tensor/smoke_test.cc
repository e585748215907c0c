#include <catch2/catch.hpp>
#include <Eigen/Dense>

TEST_CASE("eigen is reachable") {
  Eigen::Matrix2f m = Eigen::Matrix2f::Identity();
  REQUIRE(m.sum() == 2.0f);
}
