// Reductions. Shape legend: x is viewed as [outer, n, inner] (row-major), out as [outer, inner].
//
// Sums are deterministic whatever the thread count: a contiguous row is reduced in fixed blocks
// of kBlock elements (in parallel when long) and the block results are combined in order; a
// reduction over rows (inner > 1) takes each column in row order, whatever the split of the
// columns between threads.
//
// Max propagates NaN, like torch.max and the CUDA kernels (cuda_kernels/reduce.cu): a NaN
// anywhere in the reduced elements makes the result NaN; argmax counts NaN as the maximum and
// returns the first NaN's index, as torch.argmax does.
#include <algorithm>
#include <vector>

#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {
namespace {

constexpr int64_t kBlock = 1 << 14;

/// The larger of a and b, or NaN when either is.
template <class T>
T max_nan(T a, T b) {
  return (b > a || b != b) ? b : a;
}

template <class T>
T reduce_block(ReduceOp op, const T* p, int64_t len) {
  const ConstVec<T> v(p, len);
  return op == ReduceOp::kMax ? v.template maxCoeff<Eigen::PropagateNaN>() : v.sum();
}

/// Sum or max of p[0, n) by fixed blocks; the mean divides by n afterwards.
template <class T>
T reduce_row(ReduceOp op, const T* p, int64_t n, bool parallel) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  if (blocks <= 1) return n == 0 ? T(0) : reduce_block(op, p, n);
  std::vector<T> partial(static_cast<size_t>(blocks));
  auto reduce_blocks = [&](int64_t b, int64_t e) {
    for (; b < e; ++b) {
      partial[b] = reduce_block(op, p + b * kBlock, std::min(kBlock, n - b * kBlock));
    }
  };
  if (parallel) {
    parallel_for(blocks, kBlock, reduce_blocks);
  } else {
    reduce_blocks(0, blocks);
  }
  T acc = partial[0];
  for (int64_t b = 1; b < blocks; ++b) {
    acc = op == ReduceOp::kMax ? max_nan(acc, partial[b]) : acc + partial[b];
  }
  return acc;
}

/// dst[j] = op over rows r < n of x[r * stride + j], for j < width, times scale (the mean's
/// 1/n). Rows outer and columns inner, so memory is read in order and the inner loop
/// vectorises across columns (walking a column down the rows touches one cache line per row).
/// Sums accumulate in double.
template <class T>
void reduce_columns(ReduceOp op, const T* x, int64_t n, int64_t stride, int64_t width, T scale,
                    T* dst) {
  if (n == 0) {
    std::fill(dst, dst + width, T(0) * scale);  // sum 0, mean NaN
    return;
  }
  if (op == ReduceOp::kMax) {
    std::copy(x, x + width, dst);
    for (int64_t r = 1; r < n; ++r) {
      const T* row = x + r * stride;
      for (int64_t j = 0; j < width; ++j) dst[j] = max_nan(dst[j], row[j]);
    }
    return;
  }
  std::vector<double> acc(x, x + width);
  double* a = acc.data();
  for (int64_t r = 1; r < n; ++r) {
    const T* row = x + r * stride;
    for (int64_t j = 0; j < width; ++j) a[j] += static_cast<double>(row[j]);
  }
  for (int64_t j = 0; j < width; ++j) dst[j] = static_cast<T>(a[j]) * scale;
}

template <class T>
void reduce_typed(ReduceOp op, const Tensor& x, int64_t outer, int64_t n, int64_t inner,
                  Tensor& out_t) {
  const T* xp = x.data<T>();
  T* op_out = out_t.data<T>();
  // kMean sums first; 0/0 gives NaN for an empty dim, like torch.mean.
  const T scale = op == ReduceOp::kMean ? T(1) / static_cast<T>(n) : T(1);
  const ReduceOp base = op == ReduceOp::kMax ? ReduceOp::kMax : ReduceOp::kSum;
  if (inner == 1) {  // each output reduces one contiguous row of n elements
    if (outer == 1) {
      op_out[0] = reduce_row(base, xp, n, /*parallel=*/true) * scale;
      return;
    }
    parallel_for(outer, n, [&](int64_t o, int64_t e) {
      for (; o < e; ++o) op_out[o] = reduce_row(base, xp + o * n, n, false) * scale;
    });
    return;
  }
  // Each outer index reduces an [n, inner] matrix over its rows. With one outer index the
  // columns are split across threads instead.
  auto columns = [&](int64_t o, int64_t c0, int64_t c1) {
    reduce_columns(base, xp + o * n * inner + c0, n, inner, c1 - c0, scale,
                   op_out + o * inner + c0);
  };
  if (outer == 1) {
    parallel_for(inner, n, [&](int64_t c0, int64_t c1) { columns(0, c0, c1); });
  } else {
    parallel_for(outer, n * inner, [&](int64_t o, int64_t e) {
      for (; o < e; ++o) columns(o, 0, inner);
    });
  }
}

template <class T>
void argmax_typed(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out_t) {
  const T* xp = x.data<T>();
  int64_t* idx = out_t.data<int64_t>();
  parallel_for(outer * inner, n, [&](int64_t j, int64_t e) {
    for (; j < e; ++j) {
      const T* p = xp + (j / inner) * n * inner + j % inner;  // element k at p[k * inner]
      int64_t best = 0;
      for (int64_t k = 1; k < n && p[best * inner] == p[best * inner]; ++k) {  // a NaN ends it
        const T v = p[k * inner];
        if (v > p[best * inner] || v != v) best = k;  // strict: the first maximum wins
      }
      idx[j] = best;
    }
  });
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) {
  dispatch_floating(x.dtype(), "reduce", [&](auto zero) {
    reduce_typed<decltype(zero)>(op, x, outer, n, inner, out);
  });
}

/// total += float64(Σ term(x)) by the ops it stands for (kernels.h): the square or magnitude,
/// then reduce's sum of one row; a CPU has no launches to save.
void norm_share_add(UnaryOp term, const Tensor& x, Tensor& total) {
  if (x.numel() == 0) return;
  Tensor terms = Tensor::empty(x.shape(), {x.dtype(), x.device()});
  unary(term, x, terms);
  Tensor sum = Tensor::empty(Shape{}, {x.dtype(), x.device()});
  reduce(ReduceOp::kSum, terms, 1, x.numel(), 1, sum);
  const double share = x.dtype() == DType::kFloat32 ? static_cast<double>(sum.data<float>()[0])
                                                     : sum.data<double>()[0];
  total.data<double>()[0] += share;
}

void argmax(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) {
  dispatch_floating(x.dtype(), "argmax", [&](auto zero) {
    argmax_typed<decltype(zero)>(x, outer, n, inner, out);
  });
}

}  // namespace pipewright::cpu
