// Philox4x32-10 against the Random123 known-answer vectors; the documented stream layout
// rebuilt here from philox4x32_10 alone; replay; and statistical sanity of the fills.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <thread>

#include "tensor/allocator.h"
#include "tensor/generator.h"
#include "tensor/kernels.h"
#include "tensor/ops.h"
#include "tensor/philox.h"
#include "tensor/threads.h"
#include "tests/compare.h"
#include "tests/tensor/test_util.h"

using namespace pipewright;
using pipewright::testing::equal_values;

namespace {

/// Value `index` of the stream of `seed`, from the layout documented in generator.h.
uint32_t stream_value(uint64_t seed, uint64_t index) {
  const uint64_t block = index / 4;
  const auto out = philox4x32_10(
      {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return out[index % 4];
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double variance_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size());
}

}  // namespace

TEST_CASE("philox4x32_10 matches the Random123 known-answer vectors") {
  using A4 = std::array<uint32_t, 4>;
  REQUIRE(philox4x32_10({0, 0, 0, 0}, {0, 0}) == A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  REQUIRE(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
          A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  REQUIRE(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
          A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("reserve advances by whole 4-value blocks") {
  Generator g(3, 8);
  REQUIRE(g.reserve(5) == 8);
  REQUIRE(g.offset() == 16);
  REQUIRE(g.reserve(4) == 16);
  REQUIRE(g.reserve(0) == 20);
  REQUIRE(g.offset() == 20);
  g.set_state(9, 40);
  REQUIRE(g.seed() == 9);
  REQUIRE(g.offset() == 40);
}

TEST_CASE("uniform_ follows the documented layout bit for bit") {
  const uint64_t seed = 0x123456789abcdefULL;
  Generator g(seed, 4);
  Tensor f = Tensor::empty({7});
  g.uniform_(f);
  REQUIRE(g.offset() == 12);
  const auto fv = f.to_vector<float>();
  for (uint64_t i = 0; i < 7; ++i) {
    REQUIRE(fv[i] == static_cast<float>(stream_value(seed, 4 + i) >> 8) * 0x1p-24f);
  }
  Tensor d = Tensor::empty({5}, {DType::kFloat64});
  g.uniform_(d, -1.0, 3.0);
  const auto dv = d.to_vector<double>();
  for (uint64_t i = 0; i < 5; ++i) {
    REQUIRE(dv[i] == std::fma(4.0, stream_value(seed, 12 + i) * 0x1p-32, -1.0));
  }
}

TEST_CASE("normal_ pairs values for Box-Muller as documented") {
  const uint64_t seed = 77;
  Generator g(seed);
  Tensor t = Tensor::empty({9}, {DType::kFloat64});  // odd: the last pair keeps its cosine half
  g.normal_(t, 1.0, 2.0);
  REQUIRE(g.offset() == 12);
  const auto v = t.to_vector<double>();
  for (uint64_t j = 0; j < 5; ++j) {
    const double u0 = stream_value(seed, 2 * j) * 0x1p-32, u1 = stream_value(seed, 2 * j + 1) * 0x1p-32;
    const double r = std::sqrt(-2.0 * std::log(1.0 - u0));
    REQUIRE(v[2 * j] == Approx(1.0 + 2.0 * r * std::cos(2 * M_PI * u1)).epsilon(1e-13).margin(1e-13));
    if (2 * j + 1 < 9) {
      REQUIRE(v[2 * j + 1] ==
              Approx(1.0 + 2.0 * r * std::sin(2 * M_PI * u1)).epsilon(1e-13).margin(1e-13));
    }
  }
}

TEST_CASE("the deterministic log and sincos are accurate") {
  const auto xs = testing::random_values(20000, 101, 0.0, 1.0);
  for (double u : xs) {
    const double x = 1.0 - u;  // (0, 1], as Box-Muller uses it
    REQUIRE(std::fabs(philox::log_positive(x) - std::log(x)) <= 1e-15 * std::fabs(std::log(x)));
    double s = 0, c = 0;
    philox::sincos_2pi(u, &s, &c);
    REQUIRE(std::fabs(s - std::sin(2 * M_PI * u)) < 1e-15);
    REQUIRE(std::fabs(c - std::cos(2 * M_PI * u)) < 1e-15);
  }
  for (double x : {1.0, 0x1p-32, 0.5, 2.0, 1e300, 0.7071067811865476, 1.4142135623730951}) {
    REQUIRE(std::fabs(philox::log_positive(x) - std::log(x)) <= 1e-15 * std::fabs(std::log(x)));
  }
  for (double u : {0.0, 0.125, 0.25, 0.5, 0.75, 0.999999}) {
    double s = 0, c = 0;
    philox::sincos_2pi(u, &s, &c);
    REQUIRE(std::fabs(s - std::sin(2 * M_PI * u)) < 1e-15);
    REQUIRE(std::fabs(c - std::cos(2 * M_PI * u)) < 1e-15);
  }
}

TEST_CASE("replaying from a saved (seed, offset) gives identical numbers") {
  Generator g(2024);
  Tensor warmup = Tensor::empty({13});
  g.uniform_(warmup);
  const uint64_t saved = g.offset();
  Tensor a = Tensor::empty({100, 10}), b = Tensor::empty({31}, {DType::kFloat64});
  g.normal_(a);
  g.uniform_(b, 2.0, 5.0);
  Generator replay(2024, saved);
  Tensor a2 = Tensor::empty({100, 10}), b2 = Tensor::empty({31}, {DType::kFloat64});
  replay.normal_(a2);
  replay.uniform_(b2, 2.0, 5.0);
  REQUIRE(ops::equal(a, a2));
  REQUIRE(ops::equal(b, b2));
  REQUIRE(replay.offset() == g.offset());
  Generator other_seed(2025, saved);
  Tensor a3 = Tensor::empty({100, 10});
  other_seed.normal_(a3);
  REQUIRE_FALSE(ops::equal(a, a3));
}

TEST_CASE("fills do not depend on the thread count") {
  Tensor one = Tensor::empty({300001}), all = Tensor::empty({300001});
  {
    ThreadBudgetGuard guard(1);
    Generator(5).normal_(one);
  }
  Generator(5).normal_(all);
  REQUIRE(ops::equal(one, all));
}

TEST_CASE("uniform_ has the right mean and variance") {
  Generator g(11);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Tensor t = Tensor::empty({1000000}, {dt});
    g.uniform_(t, -2.0, 4.0);
    const auto v = t.to_vector<double>();
    // Mean 1, variance 36/12 = 3; the standard error of the mean is sqrt(3/1e6) ≈ 0.0017.
    REQUIRE(std::fabs(mean_of(v) - 1.0) < 0.01);
    REQUIRE(std::fabs(variance_of(v) - 3.0) < 0.03);
    REQUIRE(*std::min_element(v.begin(), v.end()) >= -2.0);
    REQUIRE(*std::max_element(v.begin(), v.end()) < 4.0);
  }
}

TEST_CASE("normal_ has the right mean, variance and 1-sigma mass") {
  Generator g(12);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Tensor t = Tensor::empty({1000000}, {dt});
    g.normal_(t, 3.0, 0.5);
    const auto v = t.to_vector<double>();
    REQUIRE(std::fabs(mean_of(v) - 3.0) < 0.005);
    REQUIRE(std::fabs(variance_of(v) - 0.25) < 0.005);
    const auto within = std::count_if(v.begin(), v.end(),
                                      [](double x) { return std::fabs(x - 3.0) < 0.5; });
    REQUIRE(std::fabs(static_cast<double>(within) / 1e6 - 0.6827) < 0.005);
  }
}

TEST_CASE("fills reject integer and non-contiguous tensors") {
  Tensor labels = Tensor::zeros({3}, {DType::kInt64});
  REQUIRE_THROWS_WITH(Generator().normal_(labels), Catch::Contains("int64"));
  Tensor view = testing::transposed_view(Tensor::zeros({3, 4}));
  REQUIRE_THROWS_WITH(Generator().uniform_(view), Catch::Contains("non-contiguous float32 [4, 3]"));
}

TEST_CASE("dropout keeps elements whose uniform is >= p, scaled by 1/(1-p)") {
  const Kernels& k = kernels_for(DeviceType::kCPU);
  const uint64_t seed = 31, offset = 8;
  const double p = 0.3;
  const Tensor x = testing::random_tensor<float>({50000}, 102);
  Tensor out = Tensor::empty({50000}), mask = Tensor::empty({50000});
  k.dropout(seed, offset, p, x, out, mask);
  const auto xv = x.to_vector<float>(), ov = out.to_vector<float>(), mv = mask.to_vector<float>();
  int64_t kept = 0;
  for (uint64_t i = 0; i < xv.size(); ++i) {
    const float u = static_cast<float>(stream_value(seed, offset + i) >> 8) * 0x1p-24f;
    const bool keep = u >= p;
    kept += keep;
    REQUIRE(mv[i] == (keep ? static_cast<float>(1.0 / (1.0 - p)) : 0.0f));
    REQUIRE(ov[i] == xv[i] * mv[i]);
  }
  REQUIRE(std::fabs(static_cast<double>(kept) / 50000 - 0.7) < 0.01);
  Tensor out2 = Tensor::empty({50000}), mask2 = Tensor::empty({50000});
  k.dropout(seed, offset, p, x, out2, mask2);  // replay: the same mask
  REQUIRE(ops::equal(mask, mask2));
  k.dropout(seed, offset, 0.0, x, out2, mask2);
  REQUIRE(ops::equal(out2, x));
}

TEST_CASE("dropout (both dtypes) and uniform_ match the scalar stream at every offset and length") {
  // The CPU kernels compute 16 Philox blocks at a time (Note [Philox blocks in lanes] in
  // tensor/cpu/random.cc); every start within a block and lengths around the batch size.
  const Kernels& k = kernels_for(DeviceType::kCPU);
  const uint64_t seed = 0x123456789abcdefULL;
  for (uint64_t offset : {0, 1, 2, 3, 5, 63, 64, 65, 1000003}) {
    for (int64_t n : {1, 3, 63, 64, 65, 200, 40001}) {
      const Tensor x = testing::random_tensor<double>({n}, 7);
      Tensor out = Tensor::empty({n}, {DType::kFloat64}),
             mask = Tensor::empty({n}, {DType::kFloat64});
      k.dropout(seed, offset, 0.5, x, out, mask);
      const Tensor xf = testing::random_tensor<float>({n}, 8);
      Tensor out_f = Tensor::empty({n}), mask_f = Tensor::empty({n});
      k.dropout(seed, offset, 0.3, xf, out_f, mask_f);
      Tensor u = Tensor::empty({n});
      k.philox_uniform(seed, offset, -2.0, 3.0, u);
      const auto mv = mask.to_vector<double>();
      const auto mfv = mask_f.to_vector<float>();
      const auto uv = u.to_vector<float>();
      const float keep_f = static_cast<float>(1.0 / (1.0 - 0.3));
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t value = stream_value(seed, offset + static_cast<uint64_t>(i));
        INFO("offset " << offset << ", n " << n << ", i " << i);
        REQUIRE(mv[i] == (static_cast<double>(value) * 0x1p-32 >= 0.5 ? 2.0 : 0.0));
        const float u_f = static_cast<float>(value >> 8) * 0x1p-24f;
        REQUIRE(mfv[i] == (static_cast<double>(u_f) >= 0.3 ? keep_f : 0.0f));
        REQUIRE(uv[i] == philox::uniform<float>(value, -2.0, 3.0));
      }
    }
  }
}

TEST_CASE("randperm is a seeded permutation") {
  Generator g(8);
  const Tensor p = g.randperm(1000);
  REQUIRE(p.dtype() == DType::kInt64);
  auto v = p.to_vector<int64_t>();
  REQUIRE(ops::equal(p, Generator(8).randperm(1000)));
  REQUIRE_FALSE(ops::equal(p, Generator(9).randperm(1000)));
  REQUIRE_FALSE(ops::equal(p, Tensor::arange(1000, {DType::kInt64})));
  std::sort(v.begin(), v.end());
  REQUIRE(equal_values(v, Tensor::arange(1000, {DType::kInt64}).to_vector<int64_t>()));
  REQUIRE(g.offset() == 2 * 999 + 2);  // 1998 values rounded up to whole blocks
  REQUIRE(Generator().randperm(0).numel() == 0);
  REQUIRE(Generator().randperm(1).to_vector<int64_t>() == std::vector<int64_t>{0});
  REQUIRE_THROWS_WITH(Generator().randperm(-1), Catch::Contains("-1"));
}

TEST_CASE("randperm on another CPU device: the same permutation, allocated there alone") {
  const Device elsewhere = Device::cpu(5);
  const int64_t home_before = allocator_for(Device::cpu(0)).allocated();
  const Tensor p = Generator(8).randperm(1000, elsewhere);
  REQUIRE(p.device() == elsewhere);
  REQUIRE(allocator_for(elsewhere).allocated() >= 1000 * 8);
  // Nothing of it (nor any temporary) lives on cpu:0.
  REQUIRE(allocator_for(Device::cpu(0)).allocated() == home_before);
  REQUIRE(equal_values(p.to_vector<int64_t>(), Generator(8).randperm(1000).to_vector<int64_t>()));
}

TEST_CASE("default_generator is one process-wide generator") {
  REQUIRE(&default_generator() == &default_generator());
  const uint64_t before = default_generator().offset();
  Tensor t = Tensor::empty({3});
  default_generator().uniform_(t);
  REQUIRE(default_generator().offset() == before + 4);
}

TEST_CASE("GeneratorGuard installs a per-thread current generator") {
  REQUIRE(&current_generator() == &default_generator());
  Generator outer(1), inner(2);
  {
    GeneratorGuard g1(outer);
    REQUIRE(&current_generator() == &outer);
    {
      GeneratorGuard g2(inner);
      REQUIRE(&current_generator() == &inner);
      Generator* seen_elsewhere = nullptr;
      std::thread([&] { seen_elsewhere = &current_generator(); }).join();
      REQUIRE(seen_elsewhere == &default_generator());
    }
    REQUIRE(&current_generator() == &outer);
  }
  REQUIRE(&current_generator() == &default_generator());
}
