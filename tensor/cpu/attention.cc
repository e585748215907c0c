// Scaled dot-product attention, tiled: flash_attention and flash_attention_backward (the
// algorithm of FlashAttention-2, Dao 2023, written from its equations; Note [Tiled attention]).
//
// Shape legend: N = batch · heads, L = queries, S = keys, D = head dim; q, out, grad_q [N, L, D],
// k, v, grad_k, grad_v [N, S, D], lse [N, L]; Br × Bc the query × key tile (kTile each).
//
// Note [Tiled attention]
// ~~~~~~~~~~~~~~~~~~~~~~
// out = softmax(scale · q kᵀ, causal mask) v without the [N, L, S] scores: each task owns a
// tile of Br query rows and walks the key tiles, keeping per row a running max m, a running
// sum l of exp(s - m) and an unnormalised output acc; a new tile with max m' rescales the old
// ones by exp(m - m') (the online softmax, Milakov & Gimelshein 2018). At the end
// out = acc / l and lse = m + log l, the row's log-sum-exp, which is all the backward keeps.
// Causal rows see keys j <= i (top-left aligned, torch's is_causal), so a query tile stops at
// its last row's key and tiles above the diagonal are never computed: half the work.
//
// The backward recomputes each score tile from q, k and lse: p = exp(s - lse) is the forward's
// softmax, and with Δ_i = Σ_d grad_out[i, d] out[i, d] (= Σ_j p_ij dp_ij):
//   dv = pᵀ grad_out,  dp = grad_out vᵀ,  ds = p ⊙ (dp - Δ),  dq = scale · ds k,
//   dk = scale · dsᵀ q.
// FlashAttention-2 adds dq into global memory with atomics from the key tiles' workers; here
// every sum stays in one thread and in a fixed order, so the result is bitwise the same for any
// thread count. With at least as many heads (N) as threads, one task per head walks the key
// tiles and, for each, the query tiles that see it: one score tile serves dv, dk and dq, so
// the backward computes the scores once (twice in all) and makes 5 tile products per pair.
// With fewer heads than that, two passes give every thread work: pass 1, one task per key
// tile, sums dk and dv over its query tiles; pass 2, one task per query tile, sums dq over its
// key tiles; the scores and grad_out vᵀ are computed in both (7 products per pair). Both ways
// add the same products in the same order (dk and dv over ascending query tiles, dq over
// ascending key tiles), so they give the same bits. Memory stays O(N (L + S) D).
//
// 16-bit q, k, v (and grad_out) are widened to float32 first, exactly (Note [Mixed-precision
// GEMM on the CPU], tensor/cpu/gemm.cc): the products are those of a float32 kernel, as
// cuBLAS's GemmEx with CUBLAS_COMPUTE_32F computes them on the GPU.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/cpu/common.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/kernel_table.h"
#include "tensor/threads.h"

namespace pipewright::cpu {
namespace {

/// Rows and keys per tile: 64 × 64 float scores are 16 KiB, beside four 64 × D tiles of q, k,
/// v and grad_out, in a core's L2 cache for D up to 128. Each tile product is one call of the
/// backend's GEMM (gemm_tile: OpenBLAS, whose AVX-512 kernels ran these tiles 3× faster than
/// Eigen's AVX2 products here).
constexpr int64_t kTile = 64;

template <class T>
using Rows = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

/// The shapes of one call, and the causal rule.
struct Dims {
  int64_t n, l, s, d;
  bool causal;
  /// Keys a tile of query rows [r0, r1) reads: [0, keys_end(r1)).
  int64_t keys_end(int64_t r1) const { return causal ? std::min(r1, s) : s; }
  /// Query rows that read key c (causal: rows r >= c): [rows_begin(c), l).
  int64_t rows_begin(int64_t c) const { return causal ? std::min(c, l) : 0; }
  /// Keys of tile [c0, c0 + cols) that query row i sees.
  int64_t visible(int64_t i, int64_t c0, int64_t cols) const {
    return causal ? std::clamp<int64_t>(i - c0 + 1, 0, cols) : cols;
  }
  static int64_t tiles(int64_t n) { return (n + kTile - 1) / kTile; }
};

/// One [rows, cols] tile of scores, row-major, reused across a task's tiles. Aligned as Eigen's
/// vector loads are: Eigen starts a row's sum or max at its first aligned element, so a buffer
/// aligned differently in another thread would sum in another order (and differ in the last
/// bit).
template <class T>
struct ScoreTile {
  std::vector<T, Eigen::aligned_allocator<T>> data =
      std::vector<T, Eigen::aligned_allocator<T>>(static_cast<size_t>(kTile * kTile));
  Rows<T> view(int64_t rows, int64_t cols) { return Rows<T>(data.data(), rows, cols); }
};

/// p = exp(scale · q kᵀ - lse) for query rows [r0, r0 + rows) and keys [c0, c0 + cols) into
/// `p`, 0 where a causal row cannot see the key. q at row r0, k at key c0, lse at row r0.
template <class T>
void recompute_probabilities(const Dims& dims, const T* q, const T* k, const T* lse, T scale,
                             int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                             ScoreTile<T>& p) {
  gemm_tile<T>(false, true, rows, cols, dims.d, scale, q, dims.d, k, dims.d, T(0), p.data.data(),
               cols);
  Rows<T> tile = p.view(rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t visible = dims.visible(r0 + r, c0, cols);
    auto row = tile.row(r);
    row.head(visible) = (row.head(visible) - lse[r]).exp();
    row.tail(cols - visible).setZero();
  }
}

/// ds = p ⊙ (grad_out vᵀ - Δ) in place of p, with dp = grad_out vᵀ into `dp`.
template <class T>
void to_score_gradient(const Dims& dims, const T* dout, const T* v, const T* delta,
                       int64_t rows, int64_t cols, ScoreTile<T>& p, ScoreTile<T>& dp) {
  gemm_tile<T>(false, true, rows, cols, dims.d, T(1), dout, dims.d, v, dims.d, T(0),
               dp.data.data(), cols);
  Rows<T> ds = p.view(rows, cols);
  const Rows<T> dps = dp.view(rows, cols);
  for (int64_t r = 0; r < rows; ++r) ds.row(r) *= dps.row(r) - delta[r];
}

template <class T>
void forward_typed(const Dims& dims, const T* q, const T* k, const T* v, T scale, T* out,
                   T* lse) {
  const int64_t row_tiles = Dims::tiles(dims.l), d = dims.d;
  const T minus_inf = -std::numeric_limits<T>::infinity();
  parallel_for(dims.n * row_tiles, kTile * dims.s * d, [&](int64_t task, int64_t end) {
    ScoreTile<T> scores;
    std::vector<T> m(kTile), l(kTile);
    for (; task < end; ++task) {
      const int64_t n = task / row_tiles, r0 = task % row_tiles * kTile;
      const int64_t rows = std::min(kTile, dims.l - r0), keys = dims.keys_end(r0 + rows);
      const int64_t at = n * dims.l + r0;
      // The output tile accumulates in place: acc, rescaled by each new tile's max.
      Rows<T> acc(out + at * d, rows, d);
      acc.setZero();
      std::fill(m.begin(), m.end(), minus_inf);
      std::fill(l.begin(), l.end(), T(0));
      for (int64_t c0 = 0; c0 < keys; c0 += kTile) {
        const int64_t cols = std::min(kTile, keys - c0);
        gemm_tile<T>(false, true, rows, cols, d, scale, q + at * d, d, k + (n * dims.s + c0) * d,
                     d, T(0), scores.data.data(), cols);
        Rows<T> s = scores.view(rows, cols);
        for (int64_t r = 0; r < rows; ++r) {
          // Key 0 is in every causal row's view, so each row's first tile has a finite max.
          const int64_t visible = dims.visible(r0 + r, c0, cols);
          auto row = s.row(r);
          const T tile_max =
              std::max(m[r], visible > 0 ? row.head(visible).maxCoeff() : minus_inf);
          row.head(visible) = (row.head(visible) - tile_max).exp();
          row.tail(cols - visible).setZero();
          const T rescale = std::exp(m[r] - tile_max);  // exp(-inf) = 0 on the first tile
          l[r] = l[r] * rescale + row.head(visible).sum();
          if (c0 > 0) acc.row(r) *= rescale;
          m[r] = tile_max;
        }
        gemm_tile<T>(false, false, rows, d, cols, T(1), scores.data.data(), cols,
                     v + (n * dims.s + c0) * d, d, T(1), out + at * d, d);
      }
      for (int64_t r = 0; r < rows; ++r) {
        if (keys == 0) {  // no key at all (S = 0): torch returns zeros
          lse[at + r] = minus_inf;
        } else {
          acc.row(r) /= l[r];
          lse[at + r] = m[r] + std::log(l[r]);
        }
      }
    }
  });
}

template <class T>
void backward_typed(const Dims& dims, const T* q, const T* k, const T* v, const T* out,
                    const T* grad_out, const T* lse, T scale, T* grad_q, T* grad_k, T* grad_v) {
  const int64_t d = dims.d;
  // Δ_i = Σ_d grad_out[i, d] · out[i, d]: the row term of the softmax's gradient.
  std::vector<T> delta(static_cast<size_t>(dims.n * dims.l));
  parallel_for(dims.n * dims.l, d, [&](int64_t i, int64_t end) {
    for (; i < end; ++i) {
      delta[i] = (ConstVec<T>(grad_out + i * d, d) * ConstVec<T>(out + i * d, d)).sum();
    }
  });

  const int64_t key_tiles = Dims::tiles(dims.s);
  // dk and dv of key tile c0 of head n (zeroed first), summing over the query tiles that see
  // it; with `also_dq`, each pair's ds also goes into dq (zeroed by the caller).
  auto key_tile = [&](int64_t n, int64_t c0, bool also_dq, ScoreTile<T>& p, ScoreTile<T>& dp) {
    const int64_t cols = std::min(kTile, dims.s - c0), kv = n * dims.s + c0;
    T* dk = grad_k + kv * d;
    T* dv = grad_v + kv * d;
    Rows<T>(dk, cols, d).setZero();
    Rows<T>(dv, cols, d).setZero();
    for (int64_t r0 = dims.rows_begin(c0); r0 < dims.l; r0 += kTile) {
      const int64_t rows = std::min(kTile, dims.l - r0), at = n * dims.l + r0;
      recompute_probabilities(dims, q + at * d, k + kv * d, lse + at, scale, r0, rows, c0, cols,
                              p);
      gemm_tile<T>(true, false, cols, d, rows, T(1), p.data.data(), cols, grad_out + at * d, d,
                   T(1), dv, d);  // dv += pᵀ grad_out
      to_score_gradient(dims, grad_out + at * d, v + kv * d, delta.data() + at, rows, cols, p,
                        dp);
      gemm_tile<T>(true, false, cols, d, rows, scale, p.data.data(), cols, q + at * d, d, T(1),
                   dk, d);  // dk += scale · dsᵀ q
      if (also_dq) {
        gemm_tile<T>(false, false, rows, d, cols, scale, p.data.data(), cols, k + kv * d, d,
                     T(1), grad_q + at * d, d);  // dq += scale · ds k
      }
    }
  };

  if (dims.n >= intra_op_threads()) {
    // One pass, one task per head (Note [Tiled attention]).
    parallel_for(dims.n, dims.l * dims.s * d, [&](int64_t n, int64_t end) {
      ScoreTile<T> p, dp;
      for (; n < end; ++n) {
        Rows<T>(grad_q + n * dims.l * d, dims.l, d).setZero();
        for (int64_t c0 = 0; c0 < dims.s; c0 += kTile) key_tile(n, c0, true, p, dp);
      }
    });
    return;
  }

  // Pass 1: dk and dv, one task per key tile, summing over the query tiles that see it.
  parallel_for(dims.n * key_tiles, kTile * dims.l * d, [&](int64_t task, int64_t end) {
    ScoreTile<T> p, dp;
    for (; task < end; ++task) {
      key_tile(task / key_tiles, task % key_tiles * kTile, false, p, dp);
    }
  });

  // Pass 2: dq, one task per query tile, summing over the key tiles it sees.
  const int64_t row_tiles = Dims::tiles(dims.l);
  parallel_for(dims.n * row_tiles, kTile * dims.s * d, [&](int64_t task, int64_t end) {
    ScoreTile<T> p, dp;
    for (; task < end; ++task) {
      const int64_t n = task / row_tiles, r0 = task % row_tiles * kTile;
      const int64_t rows = std::min(kTile, dims.l - r0), at = n * dims.l + r0;
      const int64_t keys = dims.keys_end(r0 + rows);
      T* dq = grad_q + at * d;
      Rows<T>(dq, rows, d).setZero();
      for (int64_t c0 = 0; c0 < keys; c0 += kTile) {
        const int64_t cols = std::min(kTile, keys - c0), kv = n * dims.s + c0;
        recompute_probabilities(dims, q + at * d, k + kv * d, lse + at, scale, r0, rows, c0,
                                cols, p);
        to_score_gradient(dims, grad_out + at * d, v + kv * d, delta.data() + at, rows, cols, p,
                          dp);
        gemm_tile<T>(false, false, rows, d, cols, scale, p.data.data(), cols, k + kv * d, d,
                     T(1), dq, d);  // dq += scale · ds k
      }
    }
  });
}

Dims dims_of(const Tensor& q, const Tensor& k, bool causal) {
  return {q.size(0), q.size(1), k.size(1), q.size(2), causal};
}

/// t as float32 when it is 16-bit (Note [Mixed-precision GEMM on the CPU], gemm.cc), else t.
Tensor widened(const Tensor& t) { return is_16_bit(t.dtype()) ? t.to(DType::kFloat32) : t; }

}  // namespace

void flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                     Tensor& out, Tensor& lse) {
  const Tensor qw = widened(q), kw = widened(k), vw = widened(v);
  dispatch_floating(qw.dtype(), "flash_attention", [&](auto zero) {
    using T = decltype(zero);
    forward_typed<T>(dims_of(q, k, causal), qw.data<T>(), kw.data<T>(), vw.data<T>(),
                     static_cast<T>(scale), out.data<T>(), lse.data<T>());
  });
}

void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& grad_out, const Tensor& lse,
                              double scale, bool causal, Tensor& grad_q, Tensor& grad_k,
                              Tensor& grad_v) {
  const Tensor qw = widened(q), kw = widened(k), vw = widened(v), gw = widened(grad_out);
  dispatch_floating(qw.dtype(), "flash_attention_backward", [&](auto zero) {
    using T = decltype(zero);
    backward_typed<T>(dims_of(q, k, causal), qw.data<T>(), kw.data<T>(), vw.data<T>(),
                      out.data<T>(), gw.data<T>(), lse.data<T>(), static_cast<T>(scale),
                      grad_q.data<T>(), grad_k.data<T>(), grad_v.data<T>());
  });
}

}  // namespace pipewright::cpu
