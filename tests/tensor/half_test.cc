// bfloat16 and float16 (tensor/half.h): every 16-bit pattern decoded and re-encoded; float32
// rounded to 16 bits against a reference that knows nothing of bit tricks (the nearest of the
// format's values, decoded with std::ldexp, ties to the even significand, overflow as IEEE
// 754 says); PyTorch's own conversions of 14,478 values (tests/tensor/fixtures/half.safetensors,
// written by bench/peers/half_fixture.py); and the tensors that hold them: to(dtype), fill,
// views, copies, printing, safetensors, state dicts, and the kernels that refuse them.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "nn/linear.h"
#include "nn/safetensors.h"
#include "tensor/half.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"
#include "tensor/views.h"
#include "tests/compare.h"

using namespace pipewright;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The value of a float16 pattern from IEEE 754's definition (independent of half.h).
double float16_value(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  if (exponent == 31) {
    return mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                         : (sign ? -INFINITY : INFINITY);
  }
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

// Round `x` (finite) to the format whose positive finite patterns, ascending, decode to
// `values`; `overflow` is where IEEE 754's round-to-nearest goes to infinity (the largest
// finite value plus half its ulp). Returns the pattern index of the magnitude, or -1 for inf.
int nearest(double x, const std::vector<double>& values, double overflow) {
  const double a = std::fabs(x);
  if (a >= overflow) return -1;
  auto hi = std::lower_bound(values.begin(), values.end(), a);
  if (hi == values.end()) return static_cast<int>(values.size()) - 1;
  if (*hi == a || hi == values.begin()) return static_cast<int>(hi - values.begin());
  const auto lo = hi - 1;
  const double dlo = a - *lo, dhi = *hi - a;
  const int ilo = static_cast<int>(lo - values.begin());
  if (dlo < dhi) return ilo;
  if (dhi < dlo) return ilo + 1;
  return (ilo % 2 == 0) ? ilo : ilo + 1;  // a tie: the even significand
}

// Float32 values that probe the rounding: random bits, every midpoint between neighbours of
// the 16-bit format and one float32 ulp either side of it, the overflow edge, subnormals.
std::vector<float> probes(const std::vector<double>& values) {
  std::vector<float> out;
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) out.push_back(float_of(static_cast<uint32_t>(rng())));
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    const float mid = static_cast<float>((values[i] + values[i + 1]) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      out.push_back(f);
      out.push_back(-f);
    }
  }
  for (float f : {0.0f, -0.0f, 65504.0f, 65519.996f, 65520.0f, 65536.0f, 1e-8f, 2.98e-8f,
                  2.9802322e-8f, 6e-8f, 1e-45f, 3.4028235e38f, INFINITY, -INFINITY}) {
    out.push_back(f);
  }
  return out;
}

}  // namespace

TEST_CASE("every float16 and bfloat16 pattern decodes exactly and encodes back to itself") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<uint16_t>(b);
    CAPTURE(b);
    const float f16 = Half::from_bits(h);
    const float bf16 = BFloat16::from_bits(h);
    if (std::isnan(f16)) {
      REQUIRE(Half(f16).bits == ((h & 0x8000) | 0x7E00));  // PyTorch's quiet NaN, sign kept
    } else {
      REQUIRE(static_cast<double>(f16) == float16_value(h));
      REQUIRE(Half(f16).bits == h);
    }
    REQUIRE(bits_of(bf16) == b << 16);
    REQUIRE(BFloat16(bf16).bits == (std::isnan(bf16) ? 0x7FC0 : h));
  }
}

TEST_CASE("float32 rounds to the nearest float16, ties to even, past 65520 to infinity") {
  std::vector<double> values;  // positive finite float16 values, ascending (patterns 0..0x7BFF)
  for (uint32_t h = 0; h <= 0x7BFF; ++h) values.push_back(float16_value(static_cast<uint16_t>(h)));
  const double overflow = 65504.0 + 16.0;
  int64_t checked = 0, mismatches = 0;
  uint32_t first_bad = 0;
  for (float f : probes(values)) {
    if (std::isnan(f)) continue;
    const int i = std::isinf(f) ? -1 : nearest(f, values, overflow);
    const uint16_t want = static_cast<uint16_t>((std::signbit(f) ? 0x8000 : 0) | (i < 0 ? 0x7C00 : i));
    ++checked;
    if (Half(f).bits != want && mismatches++ == 0) first_bad = bits_of(f);
  }
  CAPTURE(checked, first_bad);
  REQUIRE(mismatches == 0);
  REQUIRE(checked > 250000);
}

namespace {

// Every pattern of the 16-bit type H, then `extra` more from 0, widened by the CPU kernel's
// to(float32): each bit for bit the scalar rule's (tensor/half.h). Returns the widened tensor.
template <class H>
Tensor every_pattern_widened(uint32_t extra) {
  std::vector<H> all(65536 + extra);
  for (uint32_t b = 0; b < all.size(); ++b) all[b] = H::from_bits(static_cast<uint16_t>(b));
  const Tensor wide = Tensor::from_vector(all, Shape{static_cast<int64_t>(all.size())})
                          .to(DType::kFloat32);
  const auto* w = static_cast<const uint32_t*>(wide.raw_data());
  for (size_t i = 0; i < all.size(); ++i) {
    CAPTURE(i);
    REQUIRE(w[i] == bits_of(static_cast<float>(all[i])));
  }
  return wide;
}

}  // namespace

TEST_CASE("the CPU kernel's to(float16) and back, vectorised, follow the scalar rules bit for "
          "bit, NaN included") {
  // Every float16 pattern widened (lengths not a multiple of 8 run the scalar tail too).
  const Tensor wide = every_pattern_widened<Half>(5);
  // Rounding: the probes around every float16 value and its midpoints, every NaN kind, and the
  // float16 patterns' own floats.
  std::vector<double> values;
  for (uint32_t b = 0; b <= 0x7BFF; ++b) values.push_back(float16_value(static_cast<uint16_t>(b)));
  std::vector<float> x = probes(values);
  for (float f : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::signaling_NaN(), float_of(0x7F800001u),
                  float_of(0xFFC12345u), INFINITY, -INFINITY, 1e-45f, -1e-45f}) {
    x.push_back(f);
  }
  for (float f : wide.to_vector<float>()) x.push_back(f);
  const Tensor narrow = Tensor::from_vector(x, Shape{static_cast<int64_t>(x.size())})
                            .to(DType::kFloat16);
  const auto* n = static_cast<const uint16_t*>(narrow.raw_data());
  int64_t mismatches = 0;
  for (size_t i = 0; i < x.size(); ++i) mismatches += n[i] != Half(x[i]).bits;
  REQUIRE(mismatches == 0);
}

TEST_CASE("the CPU kernel's to(bfloat16) and back (loops the compiler vectorises) follow the "
          "scalar rules bit for bit, NaN included") {
  // Every bfloat16 pattern widened (lengths not a multiple of 8 or 16 run the scalar tail too).
  every_pattern_widened<BFloat16>(13);
  // Rounding: every bfloat16 value, its neighbours one float32 ulp away, its midpoints to the
  // next value and one ulp around them (the ties), both signs; every NaN kind; random patterns.
  std::vector<float> x;
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const uint32_t u = b << 16;
    for (uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      x.push_back(float_of(u | low));
    }
  }
  for (float f : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::signaling_NaN(), float_of(0x7F800001u),
                  float_of(0xFFFFFFFFu), float_of(0x7FFF8000u), INFINITY, -INFINITY}) {
    x.push_back(f);
  }
  std::mt19937 gen(7);
  for (int i = 0; i < 100003; ++i) x.push_back(float_of(static_cast<uint32_t>(gen())));
  const Tensor narrow = Tensor::from_vector(x, Shape{static_cast<int64_t>(x.size())})
                            .to(DType::kBFloat16);
  const auto* n = static_cast<const uint16_t*>(narrow.raw_data());
  int64_t mismatches = 0, nans = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    mismatches += n[i] != BFloat16(x[i]).bits;
    nans += std::isnan(x[i]) && n[i] == 0x7FC0;
  }
  REQUIRE(mismatches == 0);
  REQUIRE(nans > 1000);  // NaN lanes really took the vector path's rewrite
}

TEST_CASE("float32 rounds to the nearest bfloat16, ties to even, past its largest to infinity") {
  std::vector<double> values;  // positive finite bfloat16 values, ascending (0..0x7F7F)
  for (uint32_t h = 0; h <= 0x7F7F; ++h) values.push_back(float_of(h << 16));
  const double largest = float_of(0x7F7Fu << 16);
  const double overflow = largest + std::ldexp(1.0, 127 - 8);  // plus half an ulp (2^(127-7)/2)
  int64_t checked = 0, mismatches = 0;
  uint32_t first_bad = 0;
  for (float f : probes(values)) {
    if (std::isnan(f)) continue;
    const int i = std::isinf(f) ? -1 : nearest(f, values, overflow);
    const uint16_t want = static_cast<uint16_t>((std::signbit(f) ? 0x8000 : 0) | (i < 0 ? 0x7F80 : i));
    ++checked;
    if (BFloat16(f).bits != want && mismatches++ == 0) first_bad = bits_of(f);
  }
  CAPTURE(checked, first_bad);
  REQUIRE(mismatches == 0);
}

// The 16-bit patterns of `t` (bfloat16 or float16), every NaN written as one pattern: PyTorch's
// own kernels disagree on a NaN's bits (c10::BFloat16 0x7FC0, its CPU vector kernels 0xFFFF,
// CUDA's __float2bfloat16 0x7FFF); NaN staying NaN is the promise.
std::vector<uint16_t> patterns(const Tensor& t) {
  const auto* p = static_cast<const uint16_t*>(t.raw_data());
  std::vector<uint16_t> out(p, p + t.numel());
  const uint16_t exponent = t.dtype() == DType::kBFloat16 ? 0x7F80 : 0x7C00;
  for (uint16_t& h : out) {
    if ((h & exponent) == exponent && (h & ~exponent & 0x7FFF) != 0) h = 0x7FFF;
  }
  return out;
}

TEST_CASE("to(dtype) rounds as PyTorch does, bit for bit (NaN as NaN)") {
  const nn::SafetensorsFile torch = nn::load_safetensors("tests/tensor/fixtures/half.safetensors");
  const Tensor& x = torch.at("x");
  REQUIRE(x.numel() > 14000);
  for (const auto& [name, dtype] : {std::pair{"bf16", DType::kBFloat16}, {"f16", DType::kFloat16}}) {
    CAPTURE(name);
    REQUIRE(torch.at(name).dtype() == dtype);
    REQUIRE(pipewright::testing::equal_values(patterns(x.to(dtype)), patterns(torch.at(name))));
  }
  REQUIRE(patterns(torch.at("x64").to(DType::kBFloat16)) == patterns(torch.at("bf16_of_x64")));
}

TEST_CASE("16-bit values worked out by hand") {
  REQUIRE(BFloat16(1.0f).bits == 0x3F80);
  REQUIRE(BFloat16(3.14159f).bits == 0x4049);  // 3.140625
  REQUIRE(BFloat16(-2.0f).bits == 0xC000);
  REQUIRE(Half(1.0f).bits == 0x3C00);
  REQUIRE(Half(65504.0f).bits == 0x7BFF);
  REQUIRE(Half(65519.0f).bits == 0x7BFF);
  REQUIRE(Half(65520.0f).bits == 0x7C00);  // the midpoint to 2^16 rounds to infinity
  REQUIRE(Half(std::ldexp(1.0f, -24)).bits == 0x0001);
  REQUIRE(Half(std::ldexp(1.0f, -25)).bits == 0x0000);  // a tie between 0 and 2^-24: even
  REQUIRE(Half(std::ldexp(1.5f, -25)).bits == 0x0001);
  REQUIRE(Half(-0.0f).bits == 0x8000);
  REQUIRE(Half(std::numeric_limits<float>::quiet_NaN()).bits == 0x7E00);
  REQUIRE(BFloat16(-std::numeric_limits<float>::quiet_NaN()).bits == 0x7FC0);
}

TEST_CASE("to(dtype) converts 16-bit tensors both ways, as PyTorch rounds") {
  const std::vector<float> x = {1.0f, 3.14159f, -2.5e-3f, 65519.0f, 70000.0f, 1e-8f, -0.0f};
  const Tensor t = Tensor::from_vector(x, {7});
  const Tensor b = t.to(DType::kBFloat16), h = t.to(DType::kFloat16);
  REQUIRE(b.dtype() == DType::kBFloat16);
  REQUIRE(b.nbytes() == 14);
  for (size_t i = 0; i < x.size(); ++i) {
    CAPTURE(i);
    REQUIRE(b.data<BFloat16>()[i].bits == BFloat16(x[i]).bits);
    REQUIRE(h.data<Half>()[i].bits == Half(x[i]).bits);
  }
  REQUIRE(h.to(DType::kFloat32).to_vector<float>()[4] == INFINITY);
  // float64 and int64 go through float32, as PyTorch's conversions do.
  const Tensor d = Tensor::from_vector<double>({1.0 + 1e-12, -7.0}, {2});
  REQUIRE(d.to(DType::kBFloat16).to_vector<double>() == std::vector<double>{1.0, -7.0});
  REQUIRE(b.to(DType::kInt64).to_vector<int64_t>()[1] == 3);
  REQUIRE(b.to(DType::kFloat16).data<Half>()[1].bits == Half(3.140625f).bits);
}

TEST_CASE("16-bit tensors fill, view, copy, cat, select rows and print") {
  const Tensor ones = Tensor::ones({2, 3}, {.dtype = DType::kFloat16});
  REQUIRE(ones.to_vector<float>() == std::vector<float>(6, 1.0f));
  REQUIRE(Tensor::full({2}, 0.1, {.dtype = DType::kBFloat16}).data<BFloat16>()[0].bits ==
          BFloat16(0.1f).bits);
  const Tensor m = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).to(DType::kBFloat16);
  Tensor transposed = ops::transpose(m, 0, 1).contiguous();  // a strided copy of 2-byte words
  REQUIRE(transposed.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  REQUIRE(cat({m.slice(1, 2), m.slice(0, 1)}).to_vector<float>() ==
          std::vector<float>{4, 5, 6, 1, 2, 3});
  REQUIRE(ops::index_select(m, Tensor::from_vector<int64_t>({1, 1, 0})).to_vector<float>() ==
          std::vector<float>{4, 5, 6, 4, 5, 6, 1, 2, 3});
  REQUIRE(m.str() == "tensor([[1, 2, 3], [4, 5, 6]], shape=[2, 3], dtype=bfloat16, device=cpu:0)");
  REQUIRE(Tensor::full({1}, 3.14159, {.dtype = DType::kFloat16}).item() == 3.140625);
}

TEST_CASE("kernels that compute name a 16-bit dtype and the conversion to use") {
  const Tensor a = Tensor::ones({4}, {.dtype = DType::kBFloat16});
  REQUIRE_THROWS_WITH(ops::add(a, a),
                      Catch::Contains("bfloat16") &&
                          Catch::Contains("convert with to(DType::kFloat32) to compute"));
}

TEST_CASE("safetensors keeps BF16 and F16 tensors bit for bit; state dicts convert them") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/half.safetensors";
  std::vector<float> x(1000);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  for (float& v : x) v = normal(rng);
  const Tensor f32 = Tensor::from_vector(x, {10, 100});
  const Tensor b = f32.to(DType::kBFloat16), h = f32.to(DType::kFloat16);
  nn::save_safetensors(path, {{"b", b}, {"h", h}});
  const nn::SafetensorsFile file = nn::load_safetensors(path);
  REQUIRE(file.at("b").dtype() == DType::kBFloat16);
  REQUIRE(file.at("h").dtype() == DType::kFloat16);
  REQUIRE(pipewright::testing::bitwise_equal(file.at("b"), b));
  REQUIRE(pipewright::testing::bitwise_equal(file.at("h"), h));

  // A bfloat16 state dict loads into a float32 module (PyTorch's copy_ converts), exactly.
  nn::Linear layer(4, 2);
  const Tensor w16 = Tensor::from_vector<float>({1, -2, 3, 0.5f, 4, 5, -6, 7}, {2, 4})
                         .to(DType::kBFloat16);
  layer.load_state_dict({{"weight", w16}, {"bias", Tensor::zeros({2}, {.dtype = DType::kFloat16})}});
  REQUIRE(layer.weight().dtype() == DType::kFloat32);
  REQUIRE(layer.weight().to_vector<float>() == std::vector<float>{1, -2, 3, 0.5f, 4, 5, -6, 7});
  REQUIRE_THROWS_WITH(
      layer.load_state_dict({{"weight", w16}, {"bias", Tensor::zeros({2}, {.dtype = DType::kInt64})}}),
      Catch::Contains("dtype mismatch for bias: expected float32, got int64"));
}
