// Philox4x32-10 and the per-element math of the random fills, in plain inline code shared by
// the CPU kernels (tensor/cpu/random.cc) and the CUDA kernels (cuda_kernels/), which must
// produce the same bits. See tensor/generator.h for the stream layout.
//
// Note [Bit-identical random numbers]
// Only IEEE-754 basic operations are used (+, -, *, /, sqrt, fma, floor, frexp, conversions),
// which are correctly rounded on every device, so CPU and GPU agree bit for bit. That is why
// log, sin and cos are computed here by short polynomials instead of the math library (glibc
// and CUDA's libdevice round them differently in rare cases). Every multiply-add whose product
// is inexact is an explicit fma: nvcc fuses a*b+c by default (-fmad=true) and the host
// compiler may not, so an unfused a*b+c could differ between the two.
#pragma once

#include <math.h>  // fma, sqrt, floor, frexp (host and device)

#include <cstdint>

#ifdef __CUDACC__
#define PW_HOST_DEVICE __host__ __device__
#else
#define PW_HOST_DEVICE
#endif

namespace pipewright::philox {

struct Block {
  uint32_t v[4];
};

/// One Philox4x32-10 block (Salmon et al., SC'11): 10 rounds, key bumped between rounds.
PW_HOST_DEVICE inline Block philox4x32_10(Block ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;    // round multipliers
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt 3)
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * ctr.v[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * ctr.v[2];
    ctr = Block{{static_cast<uint32_t>(p1 >> 32) ^ ctr.v[1] ^ key0, static_cast<uint32_t>(p1),
                 static_cast<uint32_t>(p0 >> 32) ^ ctr.v[3] ^ key1, static_cast<uint32_t>(p0)}};
  }
  return ctr;
}

/// Block `c` of the stream of `seed`: counter (lo32(c), hi32(c), 0, 0), key (lo32, hi32 of seed).
PW_HOST_DEVICE inline Block stream_block(uint64_t seed, uint64_t c) {
  return philox4x32_10(Block{{static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0u, 0u}},
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

/// Reads the stream of `seed` from value `index` on, computing each 4-value block once.
struct Cursor {
  uint64_t seed;
  uint64_t index;
  Block block;

  PW_HOST_DEVICE Cursor(uint64_t seed_, uint64_t index_)
      : seed(seed_), index(index_), block(stream_block(seed_, index_ / 4)) {}

  PW_HOST_DEVICE uint32_t next() {
    const uint32_t value = block.v[index % 4];
    ++index;
    if (index % 4 == 0) block = stream_block(seed, index / 4);
    return value;
  }
};

// ---- uniforms: one 32-bit stream value per element ----

/// float32 in [0, 1): the top 24 bits of u, (u >> 8) * 2^-24 (exact in float).
PW_HOST_DEVICE inline float uniform01_float(uint32_t u) {
  return static_cast<float>(u >> 8) * 0x1p-24f;
}
/// float64 in [0, 1): all 32 bits of u, u * 2^-32 (exact in double).
PW_HOST_DEVICE inline double uniform01_double(uint32_t u) {
  return static_cast<double>(u) * 0x1p-32;
}

template <class T>
PW_HOST_DEVICE inline T uniform01(uint32_t u);
template <>
PW_HOST_DEVICE inline float uniform01<float>(uint32_t u) { return uniform01_float(u); }
template <>
PW_HOST_DEVICE inline double uniform01<double>(uint32_t u) { return uniform01_double(u); }

/// lo + (hi - lo) * U, computed in double with one fma, then rounded to T.
template <class T>
PW_HOST_DEVICE inline T uniform(uint32_t u, double lo, double hi) {
  return static_cast<T>(fma(hi - lo, static_cast<double>(uniform01<T>(u)), lo));
}

// ---- deterministic log, sin, cos (see the Note above) ----

/// Natural log of a positive, finite, normal x; within a few ulp of the exact value.
/// x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m-1)/(m+1).
PW_HOST_DEVICE inline double log_positive(double x) {
  constexpr double kSqrtHalf = 0.70710678118654752440;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 32 significant bits: e*kLn2Hi exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln 2 - kLn2Hi
  int e = 0;
  double m = frexp(x, &e);  // m in [0.5, 1)
  if (m < kSqrtHalf) {
    m = 2.0 * m;
    e -= 1;
  }
  const double f = m - 1.0;  // exact (Sterbenz)
  const double s = f / (2.0 + f);
  const double z = s * s;  // < 0.0295, so 11 terms of the series reach double precision
  // 2 atanh(s) = 2s + 2s * z * (1/3 + z/5 + z^2/7 + ... + z^10/23)
  double p = 1.0 / 23;
  for (int k = 10; k >= 1; --k) p = fma(p, z, 1.0 / (2 * k + 1));
  const double two_s = 2.0 * s;
  const double log_m = fma(two_s, z * p, two_s);
  const double ed = static_cast<double>(e);
  return fma(ed, kLn2Hi, fma(ed, kLn2Lo, log_m));
}

/// sin(2πu) and cos(2πu) for u in [0, 1). The reduction to a quarter turn is exact in u;
/// the remaining angle a in [-π/4, π/4] goes through Taylor series to a^17 and a^18.
PW_HOST_DEVICE inline void sincos_2pi(double u, double* sin_out, double* cos_out) {
  constexpr double kHalfPi = 1.57079632679489661923;
  const double q4 = 4.0 * u;              // quarter turns, exact
  const double q = floor(q4 + 0.5);       // nearest whole quarter turn
  const double a = (q4 - q) * kHalfPi;    // q4 - q is exact
  const double a2 = a * a;
  // sin a = a + a^3 * S(a^2), S = -1/3! + a^2/5! - ... + a^14/17!   (Horner from the top)
  double sin_poly = 1.0 / 355687428096000.0;              //  1/17!
  sin_poly = fma(sin_poly, a2, -1.0 / 1307674368000.0);   // -1/15!
  sin_poly = fma(sin_poly, a2, 1.0 / 6227020800.0);       //  1/13!
  sin_poly = fma(sin_poly, a2, -1.0 / 39916800.0);        // -1/11!
  sin_poly = fma(sin_poly, a2, 1.0 / 362880.0);           //  1/9!
  sin_poly = fma(sin_poly, a2, -1.0 / 5040.0);            // -1/7!
  sin_poly = fma(sin_poly, a2, 1.0 / 120.0);              //  1/5!
  sin_poly = fma(sin_poly, a2, -1.0 / 6.0);               // -1/3!
  // cos a = 1 + a^2 * C(a^2), C = -1/2! + a^2/4! - ... - a^16/18!
  double cos_poly = -1.0 / 6402373705728000.0;            // -1/18!
  cos_poly = fma(cos_poly, a2, 1.0 / 20922789888000.0);   //  1/16!
  cos_poly = fma(cos_poly, a2, -1.0 / 87178291200.0);     // -1/14!
  cos_poly = fma(cos_poly, a2, 1.0 / 479001600.0);        //  1/12!
  cos_poly = fma(cos_poly, a2, -1.0 / 3628800.0);         // -1/10!
  cos_poly = fma(cos_poly, a2, 1.0 / 40320.0);            //  1/8!
  cos_poly = fma(cos_poly, a2, -1.0 / 720.0);             // -1/6!
  cos_poly = fma(cos_poly, a2, 1.0 / 24.0);               //  1/4!
  cos_poly = fma(cos_poly, a2, -1.0 / 2.0);               // -1/2!
  const double sin_a = fma(a * a2, sin_poly, a);
  const double cos_a = fma(a2, cos_poly, 1.0);
  // 2πu = q·(π/2) + a: rotate (sin a, cos a) by q quarter turns.
  switch (static_cast<int>(q) & 3) {
    case 0: *sin_out = sin_a; *cos_out = cos_a; break;
    case 1: *sin_out = cos_a; *cos_out = -sin_a; break;
    case 2: *sin_out = -sin_a; *cos_out = -cos_a; break;
    default: *sin_out = -cos_a; *cos_out = sin_a; break;
  }
}

// ---- normals: Box-Muller on pairs of stream values ----

/// Two independent N(0, 1) values from stream values u0, u1 (float64 uniforms U0, U1):
/// r = sqrt(-2 log(1 - U0)) (1 - U0 is in (0, 1]), z0 = r cos(2π U1), z1 = r sin(2π U1).
PW_HOST_DEVICE inline void box_muller(uint32_t u0, uint32_t u1, double* z0, double* z1) {
  const double radius = sqrt(-2.0 * log_positive(1.0 - uniform01_double(u0)));
  double s = 0.0, c = 0.0;
  sincos_2pi(uniform01_double(u1), &s, &c);
  *z0 = radius * c;
  *z1 = radius * s;
}

/// mean + std * z, computed in double with one fma, then rounded to T.
template <class T>
PW_HOST_DEVICE inline T scale_normal(double z, double mean, double std) {
  return static_cast<T>(fma(std, z, mean));
}

// ---- dropout ----

/// Inverted-dropout multiplier of one element: U >= p keeps it, scaled by 1/(1-p).
template <class T>
PW_HOST_DEVICE inline T dropout_mask(uint32_t u, double p) {
  return static_cast<double>(uniform01<T>(u)) >= p ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
}

}  // namespace pipewright::philox
