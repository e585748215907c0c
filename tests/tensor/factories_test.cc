// Tensor's factories with torch's names: values against closed forms and the Philox stream
// (tensor/generator.h's layout, through the public philox4x32_10), dtypes, devices, and the
// errors naming the values.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tensor/allocator.h"
#include "tensor/generator.h"
#include "tensor/tensor.h"
#include "tests/compare.h"

using namespace pipewright;
using pipewright::testing::equal_values;

TEST_CASE("zeros, ones, full, scalar and empty take their dtype and device from the options") {
  const Device cpu3 = Device::cpu(3);
  const Tensor z = Tensor::zeros({2, 3}, {.dtype = DType::kFloat64, .device = cpu3});
  REQUIRE(z.shape() == Shape{2, 3});
  REQUIRE(z.dtype() == DType::kFloat64);
  REQUIRE(z.device() == cpu3);
  REQUIRE(z.to_vector<double>() == std::vector<double>(6, 0.0));
  REQUIRE(Tensor::ones({4}, {.dtype = DType::kInt64}).to_vector<int64_t>() ==
          std::vector<int64_t>{1, 1, 1, 1});
  REQUIRE(Tensor::full({2}, 2.5).to_vector<float>() == std::vector<float>{2.5f, 2.5f});
  REQUIRE(Tensor::scalar(7).dim() == 0);
  REQUIRE(Tensor::empty({0, 5}).numel() == 0);
  REQUIRE_THROWS_MATCHES(Tensor::zeros({2, -1}), std::invalid_argument,
                         Catch::Message("Tensor::empty: negative size in shape [2, -1]"));
}

TEST_CASE("arange: torch.arange(n) and arange(start, end, step)") {
  REQUIRE(Tensor::arange(4).to_vector<float>() == std::vector<float>{0, 1, 2, 3});
  REQUIRE(Tensor::arange(0).numel() == 0);
  REQUIRE(Tensor::arange(0, 1, 0.25).to_vector<float>() ==
          std::vector<float>{0, 0.25f, 0.5f, 0.75f});
  REQUIRE(Tensor::arange(5, 0, -2, {.dtype = DType::kInt64}).to_vector<int64_t>() ==
          std::vector<int64_t>{5, 3, 1});
  REQUIRE(Tensor::arange(1, 2.5).to_vector<double>() == std::vector<double>{1, 2});  // ceil(1.5)
  REQUIRE(Tensor::arange(3, 3).numel() == 0);
  const Tensor d = Tensor::arange(2, 4, 1, {.dtype = DType::kFloat64, .device = Device::cpu(2)});
  REQUIRE(d.dtype() == DType::kFloat64);
  REQUIRE(d.device() == Device::cpu(2));
  REQUIRE_THROWS_WITH(Tensor::arange(0, 1, 0), Catch::Contains("step nonzero"));
  REQUIRE_THROWS_MATCHES(
      Tensor::arange(0, 5, -1), std::invalid_argument,
      Catch::Message("arange: step goes away from end (start 0.000000, end 5.000000, step "
                     "-1.000000)"));
  REQUIRE_THROWS_AS(Tensor::arange(0, NAN), std::invalid_argument);
  REQUIRE_THROWS_MATCHES(Tensor::arange(-2), std::invalid_argument,
                         Catch::Message("arange: n must be >= 0, got -2"));
}

TEST_CASE("rand: U[0, 1) from the generator's Philox stream, which it advances") {
  Generator generator(42, 8);
  const Tensor r = Tensor::rand({2, 3}, generator);
  REQUIRE(r.dtype() == DType::kFloat32);
  REQUIRE(generator.offset() == 16);  // 6 values, rounded up to whole blocks of 4
  // Element i is (u >> 8) * 2^-24 with u the stream's value at offset 8 + i: block 2, 3.
  std::vector<float> expected;
  for (uint32_t block : {2u, 3u}) {
    for (uint32_t u : philox4x32_10({block, 0, 0, 0}, {42, 0})) {
      expected.push_back(static_cast<float>(u >> 8) * 0x1p-24f);
    }
  }
  expected.resize(6);
  REQUIRE(r.to_vector<float>() == expected);

  // The same state gives the same tensor, on any device; without a generator, the current one.
  Generator again(42, 8);
  REQUIRE(Tensor::rand({2, 3}, again, {.device = Device::cpu(1)}).to_vector<float>() == expected);
  Generator installed(42, 8);
  GeneratorGuard guard(installed);
  REQUIRE(Tensor::rand({2, 3}).to_vector<float>() == expected);
  REQUIRE(installed.offset() == 16);
}

TEST_CASE("randn: N(0, 1), replayable from the generator's state") {
  Generator generator(3);
  const Tensor n = Tensor::randn({100000}, generator, {.dtype = DType::kFloat64});
  const std::vector<double> v = n.to_vector<double>();
  double mean = 0, square = 0;
  for (double x : v) mean += x / static_cast<double>(v.size());
  for (double x : v) square += (x - mean) * (x - mean) / static_cast<double>(v.size());
  REQUIRE(std::abs(mean) < 0.01);             // 3 standard errors: 3 / sqrt(1e5) = 0.0095
  REQUIRE(std::abs(std::sqrt(square) - 1) < 0.01);
  Generator same(3);
  const Tensor replayed = Tensor::randn({100000}, same, {.dtype = DType::kFloat64});
  REQUIRE(equal_values(replayed.to_vector<double>(), v));
  Generator other(4);
  REQUIRE(Tensor::randn({4}, other).to_vector<float>() !=
          Tensor::randn({4}, generator).to_vector<float>());
  const uint64_t offset = generator.offset();
  REQUIRE_THROWS_MATCHES(Tensor::randn({2}, generator, {.dtype = DType::kInt64}),
                         std::invalid_argument,
                         Catch::Message("Tensor::randn: dtype int64 is not floating (float32 or "
                                        "float64)"));
  REQUIRE_THROWS_AS(Tensor::rand({2}, {.dtype = DType::kInt64}), std::invalid_argument);
  REQUIRE(generator.offset() == offset);  // nothing drawn
}

TEST_CASE("from_vector copies onto any device; from_blob wraps the caller's memory") {
  const Tensor v = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, Shape{3, 2},
                                       Device::cpu(4));
  REQUIRE(v.dtype() == DType::kFloat64);
  REQUIRE(v.device() == Device::cpu(4));
  REQUIRE(v.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  REQUIRE_THROWS_MATCHES(Tensor::from_vector(std::vector<float>{1, 2, 3}, Shape{2, 2}),
                         std::invalid_argument,
                         Catch::Message("from_vector: 3 values for shape [2, 2] (4 elements)"));

  std::vector<float> memory{1, 2, 3, 4, 5, 6};
  const Allocator& allocator = allocator_for(Device::cpu(5));
  const int64_t before = allocator.allocated();
  {
    Tensor blob = Tensor::from_blob(memory.data(), {2, 3}, {.device = Device::cpu(5)});
    REQUIRE(allocator.allocated() == before);  // not the allocator's memory
    REQUIRE(blob.data<float>() == memory.data());
    REQUIRE(blob.to_vector<float>() == memory);
    Tensor row = blob.slice(1, 2);
    row.copy_from(Tensor::full({1, 3}, 9));  // a write through a view reaches the memory
  }
  REQUIRE(memory == std::vector<float>{1, 2, 3, 9, 9, 9});  // and it was not freed
  REQUIRE(allocator.allocated() == before);

  auto* misaligned = reinterpret_cast<float*>(reinterpret_cast<char*>(memory.data()) + 1);
  REQUIRE_THROWS_MATCHES(Tensor::from_blob(misaligned, {2}), std::invalid_argument,
                         Catch::Message("from_blob: data is not aligned to the 4-byte elements "
                                        "of float32"));
  REQUIRE_THROWS_AS(Tensor::from_blob(nullptr, {2}), std::invalid_argument);
  REQUIRE(Tensor::from_blob(nullptr, {0}).numel() == 0);
}
