// Philox fills and dropout. The per-element math is tensor/philox.h (shared with CUDA); this
// file only walks the stream: element i uses stream value offset + i (see tensor/generator.h).
// Each thread starts its own Cursor at its first element, so the result does not depend on the
// thread count.
#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"
#include "tensor/philox.h"

namespace pipewright::cpu {
namespace {

constexpr int64_t kCostPerValue = 8;  // a Philox block is ~40 integer ops per 4 values

template <class T>
void uniform_typed(uint64_t seed, uint64_t offset, double lo, double hi, Tensor& out) {
  T* o = out.data<T>();
  parallel_for(out.numel(), kCostPerValue, [&](int64_t i, int64_t e) {
    philox::Cursor cursor(seed, offset + static_cast<uint64_t>(i));
    for (; i < e; ++i) o[i] = philox::uniform<T>(cursor.next(), lo, hi);
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

template <class T>
void dropout_typed(uint64_t seed, uint64_t offset, double p, const Tensor& x, Tensor& out,
                   Tensor& mask) {
  const T* xp = x.data<T>();
  T* o = out.data<T>();
  T* m = mask.data<T>();
  parallel_for(x.numel(), kCostPerValue, [&](int64_t i, int64_t e) {
    philox::Cursor cursor(seed, offset + static_cast<uint64_t>(i));
    for (; i < e; ++i) {
      m[i] = philox::dropout_mask<T>(cursor.next(), p);
      o[i] = xp[i] * m[i];
    }
  });
}

}  // namespace

void philox_uniform(uint64_t seed, uint64_t offset, double lo, double hi, Tensor& out) {
  dispatch_floating(out.dtype(), "philox_uniform", [&](auto zero) {
    uniform_typed<decltype(zero)>(seed, offset, lo, hi, out);
  });
}

void philox_normal(uint64_t seed, uint64_t offset, double mean, double std, Tensor& out) {
  dispatch_floating(out.dtype(), "philox_normal", [&](auto zero) {
    normal_typed<decltype(zero)>(seed, offset, mean, std, out);
  });
}

void dropout(uint64_t seed, uint64_t offset, double p, const Tensor& x, Tensor& out,
             Tensor& mask) {
  dispatch_floating(x.dtype(), "dropout", [&](auto zero) {
    dropout_typed<decltype(zero)>(seed, offset, p, x, out, mask);
  });
}

}  // namespace pipewright::cpu
