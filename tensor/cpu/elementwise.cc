// Elementwise CPU kernels: fill, copies and casts, binary/unary maps, axpy, index_select.
// Each applies an Eigen array expression to contiguous ranges, split across intra-op threads.
#include <unsupported/Eigen/SpecialFunctions>

#include <cstring>
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

// A 16-bit side converts through float32 (tensor/half.h: the rounding every device shares).
void cast(const Tensor& src, Tensor& dst) {
  dispatch_any(src.dtype(), [&](auto src_zero) {
    dispatch_any(dst.dtype(), [&](auto dst_zero) {
      using S = decltype(src_zero);
      using D = decltype(dst_zero);
      const S* s = src.data<S>();
      D* d = dst.data<D>();
      parallel_for(src.numel(), 1, [&](int64_t b, int64_t e) {
        if constexpr (is_half_type<S> || is_half_type<D>) {
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
