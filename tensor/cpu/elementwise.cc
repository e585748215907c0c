// Elementwise CPU kernels: fill, copies and casts, binary/unary maps, axpy, index_select.
// Each applies an Eigen array expression to contiguous ranges, split across intra-op threads.
#include <unsupported/Eigen/SpecialFunctions>

#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>
#endif

#include <cstring>
#include <type_traits>
#include <vector>

#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {
namespace {

/// o = a op b for Eigen arrays a, o and b an array of the same length or a scalar.
template <class A, class B, class O>
void apply_binary(BinaryOp op, const A& a, const B& b, O&& o) {
  switch (op) {
    case BinaryOp::kAdd: o = a + b; return;
    case BinaryOp::kSub: o = a - b; return;
    case BinaryOp::kMul: o = a * b; return;
    case BinaryOp::kDiv: o = a / b; return;
    case BinaryOp::kRSub: o = b - a; return;
    case BinaryOp::kRDiv: o = b / a; return;
  }
}

template <class X, class O>
void apply_unary(UnaryOp op, const X& x, O&& o) {
  using T = typename X::Scalar;
  switch (op) {
    case UnaryOp::kNeg: o = -x; return;
    case UnaryOp::kExp: o = x.exp(); return;
    case UnaryOp::kLog: o = x.log(); return;
    case UnaryOp::kSqrt: o = x.sqrt(); return;
    case UnaryOp::kRelu: o = x.max(T(0)); return;
    case UnaryOp::kSquare: o = x.square(); return;
    case UnaryOp::kAbs: o = x.abs(); return;
    case UnaryOp::kTanh: o = x.tanh(); return;
    case UnaryOp::kSigmoid: o = (T(1) + (-x).exp()).inverse(); return;
    case UnaryOp::kErf: o = x.erf(); return;
  }
}

/// dst[i] = src at the i-th row-major position of its (arbitrary) strides. Rows of the
/// innermost dim are copied whole (memcpy when that dim has stride 1, as in a permuted view
/// that keeps its last dim); an odometer over the outer dims moves the source position by one
/// stride per row. Rows are split across the intra-op threads, each range starting from the
/// multi-index of its first row.
template <class T>
void copy_strided_typed(const Tensor& src, Tensor& dst) {
  const T* s = src.data<T>();
  T* d = dst.data<T>();
  const std::vector<int64_t>& sizes = src.shape().dims();
  const std::vector<int64_t>& strides = src.strides();
  const size_t outer = sizes.size() - 1;  // rank >= 1: a rank-0 tensor is contiguous
  const int64_t width = sizes[outer], step = strides[outer];
  const int64_t rows = width == 0 ? 0 : src.numel() / width;
  parallel_for(rows, width, [&](int64_t r, int64_t end) {
    std::vector<int64_t> index(outer, 0);
    int64_t pos = 0;
    int64_t rest = r;
    for (size_t k = outer; k-- > 0;) {
      index[k] = rest % sizes[k];
      rest /= sizes[k];
      pos += index[k] * strides[k];
    }
    for (; r < end; ++r) {
      T* row = d + r * width;
      if (step == 1) {
        std::memcpy(row, s + pos, static_cast<size_t>(width) * sizeof(T));
      } else {
        for (int64_t j = 0; j < width; ++j) row[j] = s[pos + j * step];
      }
      for (size_t k = outer; k-- > 0;) {
        if (++index[k] < sizes[k]) {
          pos += strides[k];
          break;
        }
        pos -= strides[k] * (sizes[k] - 1);
        index[k] = 0;
      }
    }
  });
}

}  // namespace

void fill(Tensor& t, double value) {
  dispatch_any(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if constexpr (is_half_type<T>) {
      const T v(static_cast<float>(value));
      std::fill(t.data<T>(), t.data<T>() + t.numel(), v);
    } else {
      parallel_for(t.numel(), 1, [&](int64_t b, int64_t e) {
        out<T>(t).segment(b, e - b).setConstant(static_cast<T>(value));
      });
    }
  });
}

void copy_strided(const Tensor& src, Tensor& dst) {
  if (src.is_contiguous()) {
    // memmove: a copy between overlapping views of one storage stays defined.
    if (src.nbytes() > 0) std::memmove(dst.raw_data(), src.raw_data(), src.nbytes());
    return;
  }
  dispatch_any(src.dtype(), [&](auto zero) { copy_strided_typed<decltype(zero)>(src, dst); });
}

namespace {

// Note [float16 conversions with F16C]
// x86-64-v3 has F16C: vcvtps2ph rounds 8 floats to float16 at once, to nearest even, and
// vcvtph2ps widens 8 exactly, both IEEE 754 conversions as tensor/half.h's scalar rules are.
// They differ from those rules on NaN only (the hardware keeps a NaN's payload and quiets it),
// so NaN lanes are rewritten to the scalar rules' patterns: float16 sign | 0x7E00, float32
// sign | 0x7F800000 | payload << 13. The scalar loop converts the tail, and everything on a
// build without F16C.
void float16_from_float(const float* s, Half* d, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX2__)
  const __m128i quiet_nan = _mm_set1_epi16(0x7E00), sign = _mm_set1_epi16(static_cast<short>(0x8000));
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(s + i);
    __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 nan32 = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(_mm256_castps_si256(nan32)),
                                          _mm256_extracti128_si256(_mm256_castps_si256(nan32), 1));
    h = _mm_blendv_epi8(h, _mm_or_si128(_mm_and_si128(h, sign), quiet_nan), nan16);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
  }
#endif
  for (; i < n; ++i) d[i] = Half(s[i]);
}

void float_from_float16(const Half* s, float* d, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX2__)
  const __m256i exponent = _mm256_set1_epi32(0x7C00), low16 = _mm256_set1_epi32(0xFFFF);
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
    const __m256i h32 = _mm256_and_si256(_mm256_cvtepu16_epi32(h), low16);
    // inf and NaN lanes: sign << 16 | 0x7F800000 | mantissa << 13, as the scalar rule.
    const __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(h32, exponent), exponent);
    const __m256i scalar = _mm256_or_si256(
        _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x8000)), 16),
                        _mm256_set1_epi32(0x7F800000)),
        _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x3FF)), 13));
    f = _mm256_blendv_epi8(f, scalar, special);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), f);
  }
#endif
  for (; i < n; ++i) d[i] = static_cast<float>(s[i]);
}

}  // namespace

// A 16-bit side converts through float32 (tensor/half.h: the rounding every device shares).
void cast(const Tensor& src, Tensor& dst) {
  dispatch_any(src.dtype(), [&](auto src_zero) {
    dispatch_any(dst.dtype(), [&](auto dst_zero) {
      using S = decltype(src_zero);
      using D = decltype(dst_zero);
      const S* s = src.data<S>();
      D* d = dst.data<D>();
      parallel_for(src.numel(), 1, [&](int64_t b, int64_t e) {
        if constexpr (std::is_same_v<S, float> && std::is_same_v<D, Half>) {
          float16_from_float(s + b, d + b, e - b);  // Note [float16 conversions with F16C]
        } else if constexpr (std::is_same_v<S, Half> && std::is_same_v<D, float>) {
          float_from_float16(s + b, d + b, e - b);
        } else if constexpr (is_half_type<S> || is_half_type<D>) {
          for (int64_t i = b; i < e; ++i) d[i] = D(static_cast<float>(s[i]));
        } else {
          out<D>(dst).segment(b, e - b) = in<S>(src).segment(b, e - b).template cast<D>();
        }
      });
    });
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& o) {
  dispatch_floating(a.dtype(), "binary", [&](auto zero) {
    using T = decltype(zero);
    const ConstVec<T> av = in<T>(a), bv = in<T>(b);
    Vec<T> ov = out<T>(o);
    const int64_t n = a.numel(), period = b.numel();
    if (period == 1) {
      const T s = bv[0];
      parallel_for(n, 1, [&](int64_t i, int64_t e) {
        apply_binary(op, av.segment(i, e - i), s, ov.segment(i, e - i));
      });
    } else if (period == n) {
      parallel_for(n, 1, [&](int64_t i, int64_t e) {
        apply_binary(op, av.segment(i, e - i), bv.segment(i, e - i), ov.segment(i, e - i));
      });
    } else {  // b repeats along a's rows of `period` elements
      parallel_for(n / period, period, [&](int64_t r, int64_t e) {
        for (; r < e; ++r) {
          apply_binary(op, av.segment(r * period, period), bv, ov.segment(r * period, period));
        }
      });
    }
  });
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, Tensor& o) {
  dispatch_floating(a.dtype(), "binary_scalar", [&](auto zero) {
    using T = decltype(zero);
    parallel_for(a.numel(), 1, [&](int64_t i, int64_t e) {
      apply_binary(op, in<T>(a).segment(i, e - i), static_cast<T>(s), out<T>(o).segment(i, e - i));
    });
  });
}

void unary(UnaryOp op, const Tensor& x, Tensor& o) {
  dispatch_floating(x.dtype(), "unary", [&](auto zero) {
    using T = decltype(zero);
    parallel_for(x.numel(), 4, [&](int64_t i, int64_t e) {
      apply_unary(op, in<T>(x).segment(i, e - i), out<T>(o).segment(i, e - i));
    });
  });
}

void relu_backward(const Tensor& grad, const Tensor& y, Tensor& o) {
  dispatch_floating(grad.dtype(), "relu_backward", [&](auto zero) {
    using T = decltype(zero);
    parallel_for(grad.numel(), 1, [&](int64_t i, int64_t e) {
      out<T>(o).segment(i, e - i) =
          (in<T>(y).segment(i, e - i) > T(0)).select(in<T>(grad).segment(i, e - i), T(0));
    });
  });
}

void axpy(double alpha, const Tensor& x, Tensor& y) {
  dispatch_floating(x.dtype(), "axpy", [&](auto zero) {
    using T = decltype(zero);
    parallel_for(x.numel(), 1, [&](int64_t i, int64_t e) {
      out<T>(y).segment(i, e - i) += static_cast<T>(alpha) * in<T>(x).segment(i, e - i);
    });
  });
}

void index_select(const Tensor& src, const Tensor& index, Tensor& o) {
  const int64_t rows = src.size(0), k = index.numel();
  const int64_t* idx = index.data<int64_t>();
  for (int64_t i = 0; i < k; ++i) {  // validate first: nothing may throw inside the loop
    if (idx[i] < 0 || idx[i] >= rows) {
      throw std::out_of_range("index_select: index " + std::to_string(idx[i]) +
                              " at position " + std::to_string(i) + " is outside [0, " +
                              std::to_string(rows) + ") for src of shape " + src.shape().str());
    }
  }
  const size_t row_bytes = src.shape().numel() / std::max<int64_t>(rows, 1) *
                           element_size(src.dtype());
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(o.raw_data());
  if (row_bytes == 0) return;
  parallel_for(k, static_cast<int64_t>(row_bytes / 4), [&](int64_t i, int64_t e) {
    for (; i < e; ++i) std::memcpy(d + i * row_bytes, s + idx[i] * row_bytes, row_bytes);
  });
}

}  // namespace pipewright::cpu
