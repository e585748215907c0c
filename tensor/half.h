// The 16-bit floating types: bfloat16 and IEEE 754 binary16 (float16), as storage, with
// conversions to and from float32 that round to nearest, ties to even. The same functions run
// in CPU code, in CUDA kernels (nvcc) and under cudasim, so every device converts bit for bit
// alike.
//
//   bfloat16: 1 sign, 8 exponent, 7 mantissa bits: float32's upper half (Kalamkar et al.,
//             "A Study of BFLOAT16 for Deep Learning Training", 2019); float32's range, 3
//             significant digits.
//   float16:  1 sign, 5 exponent (bias 15), 10 mantissa bits (IEEE 754-2008 binary16): largest
//             finite 65504, smallest normal 2^-14, subnormals down to 2^-24.
//
// Float32 -> 16 bits: round to nearest, ties to even; a value past the largest finite one
// becomes ±inf (float16: from 65520 on, the midpoint to the next power of two); NaN stays NaN,
// as PyTorch's c10::BFloat16 / c10::Half spell it: bfloat16 0x7FC0 (sign dropped), float16
// sign | 0x7E00 (PyTorch's vectorised CPU kernels write a bfloat16 NaN as 0xFFFF, CUDA's
// __float2bfloat16 as 0x7FFF: only NaN-ness is common ground). Every finite value and infinity
// rounds as PyTorch 1.13 rounds it (tests/tensor/half_test.cc, against its bits). 16 bits ->
// float32 is exact. Other types convert through float32, as in PyTorch (a float64 is rounded
// to float32 first).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PW_HOST_DEVICE __host__ __device__
#else
#define PW_HOST_DEVICE
#endif

namespace pipewright {
namespace half_detail {

PW_HOST_DEVICE inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

PW_HOST_DEVICE inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

/// float32 -> bfloat16 bits: add 0x7FFF plus the lowest kept bit, then truncate; the carry
/// rounds up past the midpoint and to the even neighbour at it, and runs into the exponent
/// (up to inf) as it should.
PW_HOST_DEVICE inline uint16_t bfloat16_from_float(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

PW_HOST_DEVICE inline float float_from_bfloat16(uint16_t h) {
  return bits_float(static_cast<uint32_t>(h) << 16);
}

/// Keeps the bits of `m` above `shift`, rounding to nearest, ties to even, on the dropped ones.
PW_HOST_DEVICE inline uint32_t round_shift(uint32_t m, int shift) {
  const uint32_t kept = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
}

/// float32 -> float16 bits. Normal results keep float32's 24-bit significand rounded to 11;
/// below 2^-14 the significand is shifted into the subnormal range first. A carry out of the
/// significand moves to the next exponent (and from the largest finite value to inf).
PW_HOST_DEVICE inline uint16_t float16_from_float(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t exponent = (u >> 23) & 0xFFu, mantissa = u & 0x7FFFFFu;
  if (exponent == 0xFF) return sign | (mantissa != 0 ? 0x7E00 : 0x7C00);  // NaN, inf
  const int e = static_cast<int>(exponent) - 127 + 15;  // the float16 exponent field
  if (e >= 31) return sign | 0x7C00;                      // past 2^16: inf
  if (e >= 1) {                                           // normal
    const uint32_t rounded = round_shift((static_cast<uint32_t>(e) << 23) | mantissa, 13);
    return static_cast<uint16_t>(sign | rounded);  // a carry lands in the exponent, up to inf
  }
  if (e < -10) return sign;  // below 2^-25, half the smallest subnormal: ±0
  // Subnormal: value = (mantissa | 2^23) * 2^(exponent-150) = m * 2^-24, m = that >> (14 - e).
  return static_cast<uint16_t>(sign | round_shift(mantissa | 0x800000u, 14 - e));
}

PW_HOST_DEVICE inline float float_from_float16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return bits_float(sign | 0x7F800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Subnormal or zero: mantissa * 2^-24, exact in float32.
  const float magnitude = static_cast<float>(mantissa) * bits_float(0x33800000u);  // 2^-24
  return (sign != 0) ? -magnitude : magnitude;
}

}  // namespace half_detail

/// A bfloat16 value (storage type of DType::kBFloat16).
struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  /// Rounded to nearest, ties to even (NaN -> 0x7FC0).
  PW_HOST_DEVICE explicit BFloat16(float f) : bits(half_detail::bfloat16_from_float(f)) {}
  PW_HOST_DEVICE operator float() const { return half_detail::float_from_bfloat16(bits); }
  PW_HOST_DEVICE static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

/// An IEEE binary16 value (storage type of DType::kFloat16; PyTorch's torch.half).
struct Half {
  uint16_t bits = 0;

  Half() = default;
  /// Rounded to nearest, ties to even; ±inf from 65520 on; NaN -> sign | 0x7E00.
  PW_HOST_DEVICE explicit Half(float f) : bits(half_detail::float16_from_float(f)) {}
  PW_HOST_DEVICE operator float() const { return half_detail::float_from_float16(bits); }
  PW_HOST_DEVICE static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(BFloat16) == 2 && sizeof(Half) == 2, "16-bit storage");

/// Whether T is one of the 16-bit storage types (their arithmetic goes through float).
template <class T>
inline constexpr bool is_half_type = false;
template <>
inline constexpr bool is_half_type<BFloat16> = true;
template <>
inline constexpr bool is_half_type<Half> = true;

}  // namespace pipewright
