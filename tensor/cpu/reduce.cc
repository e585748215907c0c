// Reductions. Shape legend: x is viewed as [outer, n, inner] (row-major), out as [outer, inner].
//
// Sums are deterministic whatever the thread count: a contiguous row is reduced in fixed blocks
// of kBlock elements (in parallel when long) and the block results are combined in order.
#include <algorithm>
#include <vector>

#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {
namespace {

constexpr int64_t kBlock = 1 << 14;

template <class T>
T reduce_block(ReduceOp op, const T* p, int64_t len) {
  const ConstVec<T> v(p, len);
  return op == ReduceOp::kMax ? v.maxCoeff() : v.sum();
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
    acc = op == ReduceOp::kMax ? std::max(acc, partial[b]) : acc + partial[b];
  }
  return acc;
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
  auto reduce_columns = [&](int64_t o, int64_t c0, int64_t c1) {
    const ConstMat<T> m(xp + o * n * inner, n, inner);
    Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>> dst(op_out + o * inner + c0, c1 - c0);
    if (n == 0) {
      dst.setConstant(T(0) * scale);  // sum 0, mean NaN
    } else if (base == ReduceOp::kMax) {
      dst = m.middleCols(c0, c1 - c0).colwise().maxCoeff();
    } else {
      dst = m.middleCols(c0, c1 - c0).colwise().sum() * scale;
    }
  };
  if (outer == 1) {
    parallel_for(inner, n, [&](int64_t c0, int64_t c1) { reduce_columns(0, c0, c1); });
  } else {
    parallel_for(outer, n * inner, [&](int64_t o, int64_t e) {
      for (; o < e; ++o) reduce_columns(o, 0, inner);
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
      for (int64_t k = 1; k < n; ++k) {
        if (p[k * inner] > p[best * inner]) best = k;  // strict: the first maximum wins
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

void argmax(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) {
  dispatch_floating(x.dtype(), "argmax", [&](auto zero) {
    argmax_typed<decltype(zero)>(x, outer, n, inner, out);
  });
}

}  // namespace pipewright::cpu
