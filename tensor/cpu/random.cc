// Philox fills and dropout. The per-element math is tensor/philox.h (shared with CUDA); this
// file only walks the stream: element i uses stream value offset + i (see tensor/generator.h).
// Each thread starts its own walk at its first element, so the result does not depend on the
// thread count.
#include <immintrin.h>

#include <cmath>
#include <type_traits>

#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"
#include "tensor/philox.h"

namespace pipewright::cpu {
namespace {

constexpr int64_t kCostPerValue = 8;  // a Philox block is ~40 integer ops per 4 values

// Note [Philox blocks in lanes]
// philox::Cursor computes one block (4 values) at a time: ten rounds of dependent scalar
// multiplies, the cost of dropout (a profile of the main job had the dropout kernel above the
// GEMMs of the first layer: docs/BENCHMARKS.md, "Kernels the profile pointed at"). The blocks
// of consecutive counters are independent, so kBlockLanes of them are computed side by side,
// one AVX2 register per word of the counter per 8 blocks: _mm256_mul_epu32 forms four
// 32x32->64-bit products at once, the even lanes directly and the odd ones after a shift.
// The arithmetic is philox4x32_10's (tensor/philox.h), word for word, so the values are the
// same bits; without AVX2 the scalar function itself runs. tests/tensor/generator_test.cc
// checks dropout and uniform_ at every offset within a block against the scalar stream.
constexpr int kBlockLanes = 16;
constexpr int kBatchValues = 4 * kBlockLanes;

#ifdef __AVX2__
/// lo32 and hi32 of the eight 32x32-bit products x[l] * k.
inline void mul_hi_lo(__m256i x, __m256i k, __m256i* hi, __m256i* lo) {
  const __m256i even = _mm256_mul_epu32(x, k);                        // lanes 0, 2, 4, 6
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), k);  // lanes 1, 3, 5, 7
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

/// Stream values [4 * first_block, 4 * first_block + kBatchValues) of `seed` into out.
void philox_batch(uint64_t seed, uint64_t first_block, uint32_t* out) {
  constexpr int kVectors = kBlockLanes / 8;
  const __m256i mul0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i mul1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  __m256i c0[kVectors], c1[kVectors], c2[kVectors], c3[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    alignas(32) uint32_t lo[8], hi[8];
    for (int l = 0; l < 8; ++l) {
      const uint64_t c = first_block + static_cast<uint64_t>(8 * v + l);
      lo[l] = static_cast<uint32_t>(c);
      hi[l] = static_cast<uint32_t>(c >> 32);
    }
    c0[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo));
    c1[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi));
    c2[v] = c3[v] = _mm256_setzero_si256();
  }
  uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    const __m256i k0 = _mm256_set1_epi32(static_cast<int>(key0));
    const __m256i k1 = _mm256_set1_epi32(static_cast<int>(key1));
    for (int v = 0; v < kVectors; ++v) {
      __m256i hi0, lo0, hi1, lo1;
      mul_hi_lo(c0[v], mul0, &hi0, &lo0);
      mul_hi_lo(c2[v], mul1, &hi1, &lo1);
      c0[v] = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[v]), k0);
      c2[v] = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[v]), k1);
      c1[v] = lo1;
      c3[v] = lo0;
    }
  }
  // Words (c0, c1, c2, c3) of 8 blocks -> 32 consecutive values (a 4x8 transpose).
  for (int v = 0; v < kVectors; ++v) {
    const __m256i t0 = _mm256_unpacklo_epi32(c0[v], c1[v]),
                  t1 = _mm256_unpackhi_epi32(c0[v], c1[v]);
    const __m256i t2 = _mm256_unpacklo_epi32(c2[v], c3[v]),
                  t3 = _mm256_unpackhi_epi32(c2[v], c3[v]);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    __m256i* dst = reinterpret_cast<__m256i*>(out + 32 * v);
    _mm256_storeu_si256(dst, _mm256_permute2x128_si256(u0, u1, 0x20));      // blocks 0, 1
    _mm256_storeu_si256(dst + 1, _mm256_permute2x128_si256(u2, u3, 0x20));  // blocks 2, 3
    _mm256_storeu_si256(dst + 2, _mm256_permute2x128_si256(u0, u1, 0x31));  // blocks 4, 5
    _mm256_storeu_si256(dst + 3, _mm256_permute2x128_si256(u2, u3, 0x31));  // blocks 6, 7
  }
}
#else
void philox_batch(uint64_t seed, uint64_t first_block, uint32_t* out) {
  for (int l = 0; l < kBlockLanes; ++l) {
    const philox::Block b = philox::stream_block(seed, first_block + static_cast<uint64_t>(l));
    for (int w = 0; w < 4; ++w) out[4 * l + w] = b.v[w];
  }
}
#endif

/// Calls f(i, values, count) on consecutive runs that cover [begin, end): values[t] is stream
/// value offset + i + t, for t < count <= kBatchValues (Note [Philox blocks in lanes]).
template <class F>
void for_stream_values(uint64_t seed, uint64_t offset, int64_t begin, int64_t end, const F& f) {
  alignas(64) uint32_t values[kBatchValues];
  int64_t i = begin;
  while (i < end) {
    const uint64_t index = offset + static_cast<uint64_t>(i);
    const uint64_t block = index / 4;
    philox_batch(seed, block, values);
    const int64_t skip = static_cast<int64_t>(index - 4 * block);  // 0..3
    const int64_t take = std::min<int64_t>(kBatchValues - skip, end - i);
    f(i, values + skip, take);
    i += take;
  }
}

template <class T>
void uniform_typed(uint64_t seed, uint64_t offset, double lo, double hi, Tensor& out) {
  T* o = out.data<T>();
  parallel_for(out.numel(), kCostPerValue, [&](int64_t begin, int64_t end) {
    for_stream_values(seed, offset, begin, end, [&](int64_t i, const uint32_t* u, int64_t n) {
      for (int64_t t = 0; t < n; ++t) o[i + t] = philox::uniform<T>(u[t], lo, hi);
    });
  });
}

/// Elements 2j and 2j+1 come from one Box-Muller pair of values offset+2j, offset+2j+1.
template <class T>
void normal_typed(uint64_t seed, uint64_t offset, double mean, double std, Tensor& out) {
  T* o = out.data<T>();
  const int64_t n = out.numel();
  parallel_for((n + 1) / 2, 4 * kCostPerValue, [&](int64_t j, int64_t e) {
    philox::Cursor cursor(seed, offset + 2 * static_cast<uint64_t>(j));
    for (; j < e; ++j) {
      const uint32_t u0 = cursor.next(), u1 = cursor.next();
      double z0 = 0.0, z1 = 0.0;
      philox::box_muller(u0, u1, &z0, &z1);
      o[2 * j] = philox::scale_normal<T>(z0, mean, std);
      if (2 * j + 1 < n) o[2 * j + 1] = philox::scale_normal<T>(z1, mean, std);
    }
  });
}

/// The mask and output of n elements from their stream values; a function of its own so that
/// __restrict holds and the loop vectorises. philox::dropout_mask keeps an element when its
/// uniform U >= p; U is the integer `bits` of the value (its top 24 bits for float32, all 32
/// for float64) times the exact power of two 2^-width, so U >= p exactly when bits >=
/// ceil(p * 2^width) (p * 2^width is exact): the same decision as an integer comparison.
template <class T>
void dropout_run(const uint32_t* __restrict u, const T* __restrict x, T* __restrict out,
                 T* __restrict mask, int64_t n, uint64_t threshold, T scale) {
  constexpr int kDrop = std::is_same_v<T, float> ? 8 : 0;  // bits of u below the uniform's
  for (int64_t t = 0; t < n; ++t) {
    const T m = static_cast<uint64_t>(u[t] >> kDrop) >= threshold ? scale : T(0);
    mask[t] = m;
    out[t] = x[t] * m;
  }
}

template <class T>
void dropout_typed(uint64_t seed, uint64_t offset, double p, const Tensor& x, Tensor& out,
                   Tensor& mask) {
  const T* xp = x.data<T>();
  T* o = out.data<T>();
  T* m = mask.data<T>();
  const int width = std::is_same_v<T, float> ? 24 : 32;  // bits of the uniform (philox.h)
  const uint64_t threshold = static_cast<uint64_t>(std::ceil(std::ldexp(std::max(p, 0.0), width)));
  const T scale = static_cast<T>(1.0 / (1.0 - p));  // philox::dropout_mask's
  parallel_for(x.numel(), kCostPerValue, [&](int64_t begin, int64_t end) {
    for_stream_values(seed, offset, begin, end, [&](int64_t i, const uint32_t* u, int64_t n) {
      dropout_run<T>(u, xp + i, o + i, m + i, n, threshold, scale);
    });
  });
}

}  // namespace

void philox_uniform(uint64_t seed, uint64_t offset, double lo, double hi, Tensor& out) {
  dispatch_floating(out.dtype(), "philox_uniform",
                    [&](auto zero) { uniform_typed<decltype(zero)>(seed, offset, lo, hi, out); });
}

void philox_normal(uint64_t seed, uint64_t offset, double mean, double std, Tensor& out) {
  dispatch_floating(out.dtype(), "philox_normal",
                    [&](auto zero) { normal_typed<decltype(zero)>(seed, offset, mean, std, out); });
}

void dropout(uint64_t seed, uint64_t offset, double p, const Tensor& x, Tensor& out, Tensor& mask) {
  dispatch_floating(x.dtype(), "dropout", [&](auto zero) {
    dropout_typed<decltype(zero)>(seed, offset, p, x, out, mask);
  });
}

void dropout_indirect(const void* seed, uint64_t offset, double p, const Tensor& x, Tensor& out,
                      Tensor& mask) {
  dropout(*static_cast<const uint64_t*>(seed), offset, p, x, out, mask);
}

}  // namespace pipewright::cpu
