// Tiled attention on the GPU: flash_attention and flash_attention_backward, the algorithm of
// the CPU kernels (tensor/cpu/attention.cc, Note [Tiled attention]) mapped to thread blocks.
//
// Shape legend: N = batch · heads, L = queries, S = keys, D = head dim (at most kMaxHeadDim);
// q, out, grad_q [N, L, D], k, v, grad_k, grad_v [N, S, D], lse, delta [N, L]. A tile is kRows
// query or key rows of kD (D rounded up to 32, 64, 128 or 256) columns, zero-padded, converted
// to the accumulation type Acc (float for float32 and 16-bit inputs, double for float64) when
// it is loaded into shared memory (rows padded by one element against bank conflicts); kRows ×
// kD is at most 2,048 floats or 1,024 doubles, so the backward's four tiles and one score tile
// stay under the 48 KiB of static shared memory.
//
//   forward:  one block per (n, query tile), 128 threads. Per key tile: the scores into shared
//             memory (masked: -inf), one thread per row updates its running max m and sum l
//             and the factor exp(m_old - m) that rescales the output, then each thread
//             updates the output elements it owns (kRows · kD / 128 of them, in registers).
//   backward: delta = Σ_d grad_out · out per row (one thread per row); then, as on the CPU,
//             one block per key tile sums dk and dv over the query tiles (p and ds share one
//             shared tile), and one block per query tile sums dq over the key tiles: no
//             atomics, a fixed order, the same bits on every run.
// These kernels compute on CUDA cores from shared memory: they keep attention's memory O(N (L
// + S) D) and its traffic low. bfloat16 and float16 inputs with D <= 128 take the tensor-core
// kernels of attention_mma.cu instead (the same algorithm on wmma tiles) unless
// set_attention_tensor_cores(false). (docs/cuda.md says what ran on a card.)
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda_kernels/attention.cuh"
#include "cuda_kernels/attention_mma.h"
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

using attention_tiles::keys_end;
using attention_tiles::visible;

constexpr int kAttentionThreads = 128;
constexpr int64_t kMaxHeadDim = 256;

/// Rows per tile for head dim kD and accumulation type Acc (see the file comment).
template <class Acc, int kD>
constexpr int tile_rows() {
  const int elements = sizeof(Acc) == 4 ? 2048 : 1024;
  return elements / kD < 32 ? elements / kD : 32;
}

/// x as the accumulation type: float32 and float64 directly, a 16-bit value through float
/// (exact).
template <class Acc, class In>
__device__ inline Acc widen(In x) {
  if constexpr (std::is_same_v<In, float> || std::is_same_v<In, double>) {
    return static_cast<Acc>(x);
  } else {
    return static_cast<Acc>(static_cast<float>(x));
  }
}

/// Loads rows [r0, r0 + kRows) of a [rows, d] matrix into the first kD columns of
/// tile[kRows][kD + 1] as Acc, zeros past its end. Every thread of the block takes part. The
/// spare column staggers the rows across shared-memory banks: the score loops read row c of k
/// (or v) in thread c of a warp, which would otherwise all hit one bank.
template <class Acc, int kRows, int kD, class In>
__device__ void load_tile(const In* src, int64_t r0, int64_t rows, int64_t d,
                          Acc (&tile)[kRows][kD + 1]) {
  for (int e = threadIdx.x; e < kRows * kD; e += blockDim.x) {
    const int r = e / kD, c = e % kD;
    tile[r][c] = r0 + r < rows && c < d ? widen<Acc>(src[(r0 + r) * d + c]) : Acc(0);
  }
}

template <class Acc, int kD>
__device__ Acc dot(const Acc (&a)[kD + 1], const Acc (&b)[kD + 1]) {
  Acc sum = Acc(0);
  for (int d = 0; d < kD; ++d) sum += a[d] * b[d];
  return sum;
}

template <class In, class Acc, int kD>
__global__ void __launch_bounds__(kAttentionThreads)
    flash_forward_kernel(const In* q, const In* k, const In* v, int64_t n, int64_t l, int64_t s,
                         int64_t d, bool causal, Acc scale, Acc* out, Acc* lse) {
  constexpr int kRows = tile_rows<Acc, kD>(), kPer = kRows * kD / kAttentionThreads;
  __shared__ Acc qs[kRows][kD + 1], ks[kRows][kD + 1], vs[kRows][kD + 1];
  __shared__ Acc ps[kRows][kRows + 1];
  __shared__ Acc m_s[kRows], l_s[kRows], rescale_s[kRows];
  const int64_t row_tiles = (l + kRows - 1) / kRows;
  for (int64_t task = blockIdx.x; task < n * row_tiles; task += gridDim.x) {
    const int64_t b = task / row_tiles, r0 = task % row_tiles * kRows;
    const int64_t keys = keys_end(r0 + kRows, l, s, causal);
    load_tile<Acc, kRows, kD>(q + b * l * d, r0, l, d, qs);
    if (threadIdx.x < kRows) {
      m_s[threadIdx.x] = lowest<Acc>();
      l_s[threadIdx.x] = Acc(0);
    }
    Acc acc[kPer];
    for (int i = 0; i < kPer; ++i) acc[i] = Acc(0);
    for (int64_t c0 = 0; c0 < keys; c0 += kRows) {
      __syncthreads();  // the previous tile's readers are done
      load_tile<Acc, kRows, kD>(k + b * s * d, c0, s, d, ks);
      load_tile<Acc, kRows, kD>(v + b * s * d, c0, s, d, vs);
      __syncthreads();
      for (int e = threadIdx.x; e < kRows * kRows; e += blockDim.x) {
        const int r = e / kRows, c = e % kRows;
        ps[r][c] = visible(r0 + r, c0 + c, l, s, causal) ? scale * dot<Acc, kD>(qs[r], ks[c])
                                                         : lowest<Acc>();
      }
      __syncthreads();
      if (threadIdx.x < kRows) {
        const int r = threadIdx.x;
        Acc m = m_s[r];
        for (int c = 0; c < kRows; ++c) m = ps[r][c] > m ? ps[r][c] : m;
        if (m == lowest<Acc>()) {  // nothing visible yet (a row past L): leave it at zero
          for (int c = 0; c < kRows; ++c) ps[r][c] = Acc(0);
          rescale_s[r] = Acc(1);
        } else {
          Acc sum = Acc(0);
          for (int c = 0; c < kRows; ++c) sum += (ps[r][c] = exp(ps[r][c] - m));
          rescale_s[r] = exp(m_s[r] - m);  // 0 on the row's first visible tile
          l_s[r] = l_s[r] * rescale_s[r] + sum;
          m_s[r] = m;
        }
      }
      __syncthreads();
      for (int i = 0; i < kPer; ++i) {
        const int e = threadIdx.x + i * kAttentionThreads, r = e / kD, dd = e % kD;
        Acc sum = Acc(0);
        for (int c = 0; c < kRows; ++c) sum += ps[r][c] * vs[c][dd];
        acc[i] = acc[i] * rescale_s[r] + sum;
      }
    }
    __syncthreads();  // l_s, m_s final
    for (int i = 0; i < kPer; ++i) {
      const int e = threadIdx.x + i * kAttentionThreads, r = e / kD, dd = e % kD;
      if (r0 + r < l && dd < d) {
        out[(b * l + r0 + r) * d + dd] = l_s[r] > Acc(0) ? acc[i] / l_s[r] : Acc(0);
      }
    }
    if (threadIdx.x < kRows && r0 + threadIdx.x < l) {
      const int r = threadIdx.x;
      lse[b * l + r0 + r] = l_s[r] > Acc(0) ? m_s[r] + log(l_s[r]) : lowest<Acc>();
    }
    __syncthreads();  // before the next task overwrites the shared tiles
  }
}

/// delta[i] = Σ_d grad_out[i, d] · out[i, d], one warp per row: lane c adds columns c, c + 32,
/// ... and a warp shuffle adds the lanes, so a warp reads its row's consecutive values (one
/// thread per row read addresses d values apart: uncoalesced). blockDim.x: a multiple of 32.
template <class In, class Acc>
__global__ void attention_delta_kernel(const In* grad_out, const Acc* out, int64_t rows,
                                       int64_t d, Acc* delta) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warps_per_block = blockDim.x / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * warps_per_block;
  // The loop is warp-uniform (every lane takes the same rows), as warp_sum needs.
  for (int64_t i = blockIdx.x * warps_per_block + threadIdx.x / 32; i < rows; i += warps) {
    Acc sum = Acc(0);
    for (int64_t c = lane; c < d; c += 32) sum += widen<Acc>(grad_out[i * d + c]) * out[i * d + c];
    sum = warp_sum(sum);
    if (lane == 0) delta[i] = sum;
  }
}

/// p = exp(scale · q kᵀ - lse) into ps for query rows r0.. and keys c0.. (0 where not visible).
template <class Acc, int kRows, int kD>
__device__ void probabilities(const Acc (&qs)[kRows][kD + 1],
                              const Acc (&ks)[kRows][kD + 1],
                              const Acc (&lse_s)[kRows], int64_t r0, int64_t c0, int64_t l,
                              int64_t s, bool causal, Acc scale, Acc (&ps)[kRows][kRows + 1]) {
  for (int e = threadIdx.x; e < kRows * kRows; e += blockDim.x) {
    const int r = e / kRows, c = e % kRows;
    ps[r][c] = visible(r0 + r, c0 + c, l, s, causal)
                   ? exp(scale * dot<Acc, kD>(qs[r], ks[c]) - lse_s[r]) : Acc(0);
  }
}

/// ps := p ⊙ (grad_out vᵀ - delta), in place.
template <class Acc, int kRows, int kD>
__device__ void score_gradients(const Acc (&dos)[kRows][kD + 1],
                                const Acc (&vs)[kRows][kD + 1],
                                const Acc (&delta_s)[kRows], Acc (&ps)[kRows][kRows + 1]) {
  for (int e = threadIdx.x; e < kRows * kRows; e += blockDim.x) {
    const int r = e / kRows, c = e % kRows;
    if (ps[r][c] != Acc(0)) ps[r][c] *= dot<Acc, kD>(dos[r], vs[c]) - delta_s[r];
  }
}

/// lse and delta of rows [r0, r0 + kRows) into shared memory (rows past L: never visible).
template <class Acc, int kRows>
__device__ void load_row_terms(const Acc* lse, const Acc* delta, int64_t r0, int64_t l,
                               Acc* lse_s, Acc* delta_s) {
  if (threadIdx.x < kRows) {
    const int64_t i = r0 + threadIdx.x;
    lse_s[threadIdx.x] = i < l ? lse[i] : Acc(0);
    delta_s[threadIdx.x] = i < l ? delta[i] : Acc(0);
  }
}

template <class In, class Acc, int kD>
__global__ void __launch_bounds__(kAttentionThreads)
    flash_backward_kv_kernel(const In* q, const In* k, const In* v, const In* grad_out,
                             const Acc* lse, const Acc* delta, int64_t n, int64_t l, int64_t s,
                             int64_t d, bool causal, Acc scale, Acc* grad_k, Acc* grad_v) {
  constexpr int kRows = tile_rows<Acc, kD>(), kPer = kRows * kD / kAttentionThreads;
  __shared__ Acc ks[kRows][kD + 1], vs[kRows][kD + 1];
  __shared__ Acc qs[kRows][kD + 1], dos[kRows][kD + 1];
  __shared__ Acc ps[kRows][kRows + 1];
  __shared__ Acc lse_s[kRows], delta_s[kRows];
  const int64_t key_tiles = (s + kRows - 1) / kRows;
  for (int64_t task = blockIdx.x; task < n * key_tiles; task += gridDim.x) {
    const int64_t b = task / key_tiles, c0 = task % key_tiles * kRows;
    load_tile<Acc, kRows, kD>(k + b * s * d, c0, s, d, ks);
    load_tile<Acc, kRows, kD>(v + b * s * d, c0, s, d, vs);
    Acc dk[kPer], dv[kPer];
    for (int i = 0; i < kPer; ++i) dk[i] = dv[i] = Acc(0);
    for (int64_t r0 = causal ? c0 : 0; r0 < l; r0 += kRows) {
      __syncthreads();  // the previous tile's readers are done
      load_tile<Acc, kRows, kD>(q + b * l * d, r0, l, d, qs);
      load_tile<Acc, kRows, kD>(grad_out + b * l * d, r0, l, d, dos);
      load_row_terms<Acc, kRows>(lse + b * l, delta + b * l, r0, l, lse_s, delta_s);
      __syncthreads();
      probabilities<Acc, kRows, kD>(qs, ks, lse_s, r0, c0, l, s, causal, scale, ps);
      __syncthreads();
      for (int i = 0; i < kPer; ++i) {  // dv += pᵀ grad_out
        const int e = threadIdx.x + i * kAttentionThreads, c = e / kD, dd = e % kD;
        for (int r = 0; r < kRows; ++r) dv[i] += ps[r][c] * dos[r][dd];
      }
      __syncthreads();
      score_gradients<Acc, kRows, kD>(dos, vs, delta_s, ps);
      __syncthreads();
      for (int i = 0; i < kPer; ++i) {  // dk += dsᵀ q
        const int e = threadIdx.x + i * kAttentionThreads, c = e / kD, dd = e % kD;
        for (int r = 0; r < kRows; ++r) dk[i] += ps[r][c] * qs[r][dd];
      }
    }
    for (int i = 0; i < kPer; ++i) {
      const int e = threadIdx.x + i * kAttentionThreads, c = e / kD, dd = e % kD;
      if (c0 + c < s && dd < d) {
        grad_k[(b * s + c0 + c) * d + dd] = dk[i] * scale;
        grad_v[(b * s + c0 + c) * d + dd] = dv[i];
      }
    }
    __syncthreads();  // before the next task overwrites the shared tiles
  }
}

template <class In, class Acc, int kD>
__global__ void __launch_bounds__(kAttentionThreads)
    flash_backward_q_kernel(const In* q, const In* k, const In* v, const In* grad_out,
                            const Acc* lse, const Acc* delta, int64_t n, int64_t l, int64_t s,
                            int64_t d, bool causal, Acc scale, Acc* grad_q) {
  constexpr int kRows = tile_rows<Acc, kD>(), kPer = kRows * kD / kAttentionThreads;
  __shared__ Acc qs[kRows][kD + 1], dos[kRows][kD + 1];
  __shared__ Acc ks[kRows][kD + 1], vs[kRows][kD + 1];
  __shared__ Acc ps[kRows][kRows + 1];
  __shared__ Acc lse_s[kRows], delta_s[kRows];
  const int64_t row_tiles = (l + kRows - 1) / kRows;
  for (int64_t task = blockIdx.x; task < n * row_tiles; task += gridDim.x) {
    const int64_t b = task / row_tiles, r0 = task % row_tiles * kRows;
    const int64_t keys = keys_end(r0 + kRows, l, s, causal);
    load_tile<Acc, kRows, kD>(q + b * l * d, r0, l, d, qs);
    load_tile<Acc, kRows, kD>(grad_out + b * l * d, r0, l, d, dos);
    load_row_terms<Acc, kRows>(lse + b * l, delta + b * l, r0, l, lse_s, delta_s);
    Acc dq[kPer];
    for (int i = 0; i < kPer; ++i) dq[i] = Acc(0);
    for (int64_t c0 = 0; c0 < keys; c0 += kRows) {
      __syncthreads();  // the previous tile's readers are done
      load_tile<Acc, kRows, kD>(k + b * s * d, c0, s, d, ks);
      load_tile<Acc, kRows, kD>(v + b * s * d, c0, s, d, vs);
      __syncthreads();
      probabilities<Acc, kRows, kD>(qs, ks, lse_s, r0, c0, l, s, causal, scale, ps);
      __syncthreads();
      score_gradients<Acc, kRows, kD>(dos, vs, delta_s, ps);
      __syncthreads();
      for (int i = 0; i < kPer; ++i) {  // dq += ds k
        const int e = threadIdx.x + i * kAttentionThreads, r = e / kD, dd = e % kD;
        for (int c = 0; c < kRows; ++c) dq[i] += ps[r][c] * ks[c][dd];
      }
    }
    for (int i = 0; i < kPer; ++i) {
      const int e = threadIdx.x + i * kAttentionThreads, r = e / kD, dd = e % kD;
      if (r0 + r < l && dd < d) grad_q[(b * l + r0 + r) * d + dd] = dq[i] * scale;
    }
    __syncthreads();  // before the next task overwrites the shared tiles
  }
}

/// Calls f(In{}, Acc{}) for the inputs' dtype: float32 -> (float, float), float64 ->
/// (double, double), bfloat16 / float16 -> (BFloat16 / Half, float).
template <class F>
void dispatch_attention(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kBFloat16: f(BFloat16{}, float{}); return;
    case DType::kFloat16: f(Half{}, float{}); return;
    default: dispatch_floating(dtype, op, [&](auto zero) { f(zero, zero); });
  }
}

/// Calls f(std::integral_constant<int, kD>{}) for the tile width that holds head dim d.
template <class F>
void dispatch_head_dim(int64_t d, const char* op, F&& f) {
  if (d <= 32) return f(std::integral_constant<int, 32>{});
  if (d <= 64) return f(std::integral_constant<int, 64>{});
  if (d <= 128) return f(std::integral_constant<int, 128>{});
  if (d <= kMaxHeadDim) return f(std::integral_constant<int, 256>{});
  throw std::invalid_argument(std::string("cuda ") + op + ": head dim D = " + std::to_string(d) +
                              " is over the kernels' " + std::to_string(kMaxHeadDim));
}

/// Blocks for `tasks` tiles (the kernels loop over the rest).
unsigned tile_grid(int64_t tasks) { return row_grid(tasks); }

}  // namespace

void flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                     Tensor& out, Tensor& lse) {
  const int64_t n = q.size(0), l = q.size(1), s = k.size(1), d = q.size(2);
  if (tensor_core_attention_applies(q.dtype(), d)) {
    return flash_attention_mma(q, k, v, scale, causal, out, lse);
  }
  LaunchContext ctx(out);
  dispatch_attention(q.dtype(), "flash_attention", [&](auto in_zero, auto acc_zero) {
    using In = decltype(in_zero);
    using Acc = decltype(acc_zero);
    dispatch_head_dim(d, "flash_attention", [&](auto width) {
      constexpr int kD = decltype(width)::value;
      constexpr int kRows = tile_rows<Acc, kD>();
      PW_LAUNCH((flash_forward_kernel<In, Acc, kD>), tile_grid(n * ((l + kRows - 1) / kRows)),
                kAttentionThreads, 0, ctx.stream)(
          q.data<In>(), k.data<In>(), v.data<In>(), n, l, s, d, causal, static_cast<Acc>(scale),
          out.data<Acc>(), lse.data<Acc>());
    });
  });
  PW_CUDA_CHECK_LAUNCH("flash_forward_kernel");
}

void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& grad_out, const Tensor& lse,
                              double scale, bool causal, Tensor& grad_q, Tensor& grad_k,
                              Tensor& grad_v) {
  const int64_t n = q.size(0), l = q.size(1), s = k.size(1), d = q.size(2);
  LaunchContext ctx(grad_q);
  Tensor delta = Tensor::empty(Shape{n, l}, {out.dtype(), out.device()});
  dispatch_attention(q.dtype(), "flash_attention_backward", [&](auto in_zero, auto acc_zero) {
    using In = decltype(in_zero);
    using Acc = decltype(acc_zero);
    PW_LAUNCH((attention_delta_kernel<In, Acc>), grid_for(n * l * 32), kBlock, 0, ctx.stream)(
        grad_out.data<In>(), out.data<Acc>(), n * l, d, delta.data<Acc>());
    PW_CUDA_CHECK_LAUNCH("attention_delta_kernel");
    if (tensor_core_attention_applies(q.dtype(), d)) {
      return flash_attention_backward_mma(q, k, v, grad_out, lse, delta, scale, causal, grad_q,
                                          grad_k, grad_v);
    }
    dispatch_head_dim(d, "flash_attention_backward", [&](auto width) {
      constexpr int kD = decltype(width)::value;
      constexpr int kRows = tile_rows<Acc, kD>();
      const Acc acc_scale = static_cast<Acc>(scale);
      PW_LAUNCH((flash_backward_kv_kernel<In, Acc, kD>),
                tile_grid(n * ((s + kRows - 1) / kRows)), kAttentionThreads, 0, ctx.stream)(
          q.data<In>(), k.data<In>(), v.data<In>(), grad_out.data<In>(), lse.data<Acc>(),
          delta.data<Acc>(), n, l, s, d, causal, acc_scale, grad_k.data<Acc>(),
          grad_v.data<Acc>());
      PW_CUDA_CHECK_LAUNCH("flash_backward_kv_kernel");
      PW_LAUNCH((flash_backward_q_kernel<In, Acc, kD>),
                tile_grid(n * ((l + kRows - 1) / kRows)), kAttentionThreads, 0, ctx.stream)(
          q.data<In>(), k.data<In>(), v.data<In>(), grad_out.data<In>(), lse.data<Acc>(),
          delta.data<Acc>(), n, l, s, d, causal, acc_scale, grad_q.data<Acc>());
      PW_CUDA_CHECK_LAUNCH("flash_backward_q_kernel");
    });
  });
}

}  // namespace pipewright::cuda
