// Dataset: construction checks, slice views, gather copies.
#include "data/dataset.h"

#include <catch2/catch.hpp>

#include <vector>

#include "tensor/tensor.h"

namespace pipewright::data {
namespace {

using Catch::Contains;

// 5 samples: inputs [5, 2] with row i = (10 i, 10 i + 1), targets [5] = i.
Dataset five_samples() {
  std::vector<float> x;
  for (int i = 0; i < 5; ++i) x.insert(x.end(), {10.0f * i, 10.0f * i + 1});
  return Dataset(Tensor::from_vector(x, {5, 2}),
                 Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST_CASE("Dataset holds inputs [N, ...] and targets [N]") {
  const Dataset ds = five_samples();
  REQUIRE(ds.size() == 5);
  REQUIRE(ds.inputs().shape() == Shape{5, 2});
  REQUIRE(ds.targets().shape() == Shape{5});
}

TEST_CASE("Dataset::slice returns views") {
  const Dataset ds = five_samples();
  const Batch b = ds.slice(1, 4);
  REQUIRE(b.size() == 3);
  REQUIRE(b.inputs.shape() == Shape{3, 2});
  REQUIRE(b.inputs.shares_storage(ds.inputs()));
  REQUIRE(b.targets.shares_storage(ds.targets()));
  REQUIRE(b.inputs.to_vector<float>() == std::vector<float>{10, 11, 20, 21, 30, 31});
  REQUIRE(b.targets.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});
  REQUIRE_THROWS_AS(ds.slice(3, 6), std::out_of_range);
}

TEST_CASE("Dataset::gather copies the named samples in order") {
  const Dataset ds = five_samples();
  const Batch b = ds.gather(Tensor::from_vector(std::vector<int64_t>{4, 0, 4}));
  REQUIRE(b.size() == 3);
  REQUIRE(b.inputs.is_contiguous());
  REQUIRE_FALSE(b.inputs.shares_storage(ds.inputs()));
  REQUIRE(b.inputs.to_vector<float>() == std::vector<float>{40, 41, 0, 1, 40, 41});
  REQUIRE(b.targets.to_vector<int64_t>() == std::vector<int64_t>{4, 0, 4});

  REQUIRE_THROWS_AS(ds.gather(Tensor::from_vector(std::vector<int64_t>{5})), std::out_of_range);
  REQUIRE_THROWS_WITH(ds.gather(Tensor::from_vector(std::vector<float>{1.0f})),
                      Contains("int64 [K]") && Contains("float32 [1]"));
}

TEST_CASE("Dataset rejects mismatched or malformed tensors, naming the shapes") {
  const Tensor x = Tensor::zeros({4, 3});
  REQUIRE_THROWS_WITH(Dataset(x, Tensor::zeros({5}, {.dtype = DType::kInt64})),
                      Contains("different sample counts") && Contains("[4, 3]") &&
                          Contains("[5]"));
  REQUIRE_THROWS_WITH(Dataset(x, Tensor::zeros({4, 1})), Contains("targets must be [N]") &&
                                                             Contains("[4, 1]"));
  REQUIRE_THROWS_WITH(Dataset(Tensor::scalar(1.0), Tensor::zeros({1})), Contains("rank 0"));
  REQUIRE_THROWS_WITH(Dataset(Tensor(), Tensor::zeros({1})), Contains("inputs is undefined"));
  REQUIRE_THROWS_AS(Dataset(x, Tensor()), std::invalid_argument);
}

}  // namespace
}  // namespace pipewright::data
