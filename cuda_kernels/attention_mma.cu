// Tiled attention on tensor cores: the algorithm of attention.cu's kernels (online softmax
// forward; a backward that recomputes the probabilities, one kernel summing dk and dv per key
// tile and one summing dq per query tile, no atomics) with every tile product a warp's
// 16 × 16 × 16 matrix multiply-accumulate (nvcuda::wmma, 16-bit inputs, float32 sums).
//
// Shape legend as attention.cu: N = batch · heads, L = queries, S = keys, D = head dim
// (at most 128), padded to kD = 64 or 128 with zeros. A block is 4 warps; each warp owns
// 16 rows of the block's tile (queries in the forward and the dq kernel, keys in the dk/dv
// kernel) and keeps its 16 × kD operands (q, grad_out or k, v) as matrix fragments and its
// 16 × kD sums (out, dq or dk, dv) as float accumulators for the whole task. Per tile of the
// other side (kK keys or kQ queries, in shared memory, padded by 8 elements a row):
//
//   forward   s = q kᵀ (a 16 × kK float tile of the warp's own), then two lanes per row update
//             the row's running max m and sum l, write p = exp(scale s - m) rounded to the
//             input dtype, and the factor exp(m_old - m); the accumulators are rescaled by it
//             (through shared memory: a fragment's element-to-row mapping is unspecified) and
//             o += p v. out = o / l, lse = m + log l.
//   dk, dv    sᵀ = k qᵀ and dpᵀ = v grad_outᵀ; p = exp(scale s - lse), ds = p (dp - delta),
//             both rounded; dv += pᵀ grad_out, dk += dsᵀ q; grad_k = scale dk.
//   dq        s = q kᵀ, dp = grad_out vᵀ, ds as above; dq += ds k; grad_q = scale dq.
//
// Rounding p and ds to 16 bits before their products is what FlashAttention-2 and PyTorch's
// fused bf16 kernels do; the sums stay float32 (attention_mma.h states the bound).
// Shared memory stays under the 48 KiB of static shared memory for both widths (the layouts'
// static_asserts); the operands a warp keeps are staged through the tiles' space first.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda_kernels/attention.cuh"
#include "cuda_kernels/attention_mma.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

namespace wmma = nvcuda::wmma;
using attention_tiles::keys_end;
using attention_tiles::visible;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr unsigned kFullWarp = 0xffffffffu;

std::atomic<bool> g_tensor_cores{true};

/// The tensor cores' element type of a 16-bit storage type.
template <class In>
struct MmaType;
template <>
struct MmaType<BFloat16> {
  using type = __nv_bfloat16;
};
template <>
struct MmaType<Half> {
  using type = __half;
};

/// x rounded to nearest, ties to even.
template <class Tc>
__device__ inline Tc round_to(float x) {
  if constexpr (std::is_same_v<Tc, __nv_bfloat16>) {
    return __float2bfloat16(x);
  } else {
    return __float2half(x);
  }
}

template <class Tc>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, Tc, wmma::row_major>;
template <class Tc>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, Tc, wmma::row_major>;
template <class Tc>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, Tc, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// Rows [r0, r0 + count) of a [rows, d] matrix into `tile` (row stride kD + 8 elements):
/// zeros past row `rows` and column d. Every thread of the block takes part. With `vec` (d a
/// multiple of 8, the source 16-byte aligned) eight elements move per load.
template <int kD, class In, class Tc>
__device__ void load_rows(const In* src, int64_t r0, int count, int64_t rows, int64_t d,
                          bool vec, Tc* tile) {
  constexpr int kLd = kD + 8;
  if (vec) {
    constexpr int kChunks = kD / 8;
    for (int e = threadIdx.x; e < count * kChunks; e += blockDim.x) {
      const int r = e / kChunks, c = e % kChunks * 8;
      uint4 word = make_uint4(0, 0, 0, 0);
      if (r0 + r < rows && c < d) word = *reinterpret_cast<const uint4*>(src + (r0 + r) * d + c);
      *reinterpret_cast<uint4*>(tile + r * kLd + c) = word;
    }
  } else {
    uint16_t* out = reinterpret_cast<uint16_t*>(tile);
    for (int e = threadIdx.x; e < count * kD; e += blockDim.x) {
      const int r = e / kD, c = e % kD;
      out[r * kLd + c] = r0 + r < rows && c < d ? src[(r0 + r) * d + c].bits : uint16_t(0);
    }
  }
}

/// Loads a warp's 16 rows × kD operand from a staged tile (stride kD + 8) as fragments.
template <int kD, class Tc>
__device__ void load_operand(const Tc* rows, FragA<Tc> (&frag)[kD / 16]) {
  for (int f = 0; f < kD / 16; ++f) wmma::load_matrix_sync(frag[f], rows + 16 * f, kD + 8);
}

/// The backward's two operands of the warp (rows [r0 + 16 w, r0 + 16 w + 16) of two [rows, d]
/// matrices: k and v, or q and grad_out), staged through `staged` (2 · count rows of stride
/// kD + 8) by the whole block, with a barrier between the staging and the fragment loads;
/// writes to `staged` after it need another barrier first (the tile loops begin with one).
template <int kD, class In, class Tc>
__device__ void load_operand_pair(const In* a, const In* b, int64_t r0, int count, int64_t rows,
                                  int64_t d, bool vec, Tc* staged, FragA<Tc> (&fa)[kD / 16],
                                  FragA<Tc> (&fb)[kD / 16]) {
  load_rows<kD>(a, r0, count, rows, d, vec, staged);
  load_rows<kD>(b, r0, count, rows, d, vec, staged + count * (kD + 8));
  __syncthreads();
  const int warp = threadIdx.x / 32;
  load_operand<kD>(staged + 16 * warp * (kD + 8), fa);
  load_operand<kD>(staged + (count + 16 * warp) * (kD + 8), fb);
}

/// acc[i] = a (16 × kD, fragments) · bᵀ, b the 16 rows of `tile` from row 16 j (stride
/// kD + 8) read as a column-major kD × 16 matrix; stored into out (16 × 16, stride ld).
template <int kD, class Tc>
__device__ void product_transposed(const FragA<Tc> (&a)[kD / 16], const Tc* b_rows, float* out,
                                   int ld) {
  FragC acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int f = 0; f < kD / 16; ++f) {
    FragBCol<Tc> b;
    wmma::load_matrix_sync(b, b_rows + 16 * f, kD + 8);
    wmma::mma_sync(acc, a[f], b, acc);
  }
  wmma::store_matrix_sync(out, acc, ld, wmma::mem_row_major);
}

/// The backward's two score tiles for kT rows of the other side: s = a · btileᵀ and
/// dp = c · dtileᵀ (16 × kT each, stride ld).
template <int kD, int kT, class Tc>
__device__ void score_tile_pair(const FragA<Tc> (&a)[kD / 16], const Tc* btile,
                                const FragA<Tc> (&c)[kD / 16], const Tc* dtile, float* s_out,
                                float* dp_out, int ld) {
  for (int t = 0; t < kT / 16; ++t) {
    product_transposed<kD>(a, btile + 16 * t * (kD + 8), s_out + 16 * t, ld);
    product_transposed<kD>(c, dtile + 16 * t * (kD + 8), dp_out + 16 * t, ld);
  }
}

/// acc[f] += a · b for the warp: a 16 × kT (row stride lda) and b kT × kD (a tile, stride
/// kD + 8), column block f of the result in acc[f].
template <int kD, int kT, class Tc>
__device__ void accumulate_product(const Tc* a, int lda, const Tc* b, FragC (&acc)[kD / 16]) {
  for (int t = 0; t < kT / 16; ++t) {
    FragA<Tc> fa;
    wmma::load_matrix_sync(fa, a + 16 * t, lda);
    for (int f = 0; f < kD / 16; ++f) {
      FragBRow<Tc> fb;
      wmma::load_matrix_sync(fb, b + 16 * t * (kD + 8) + 16 * f, kD + 8);
      wmma::mma_sync(acc[f], fa, fb, acc[f]);
    }
  }
}

/// Calls f(row, column, value&) for every element of the warp's 16 × kD accumulators, through
/// `scratch` (16 rows of stride ld, room for kCap fragments side by side); with `write_back`
/// the accumulators are reloaded from what f left. Every lane of the warp takes part.
template <int kD, int kCap, bool kWriteBack, class F>
__device__ void for_each_element(FragC (&acc)[kD / 16], float* scratch, int ld, F&& f) {
  constexpr int kF = kD / 16, kBatch = kCap < kF ? kCap : kF;
  const int lane = threadIdx.x % 32;
  for (int f0 = 0; f0 < kF; f0 += kBatch) {
    for (int b = 0; b < kBatch; ++b) {
      wmma::store_matrix_sync(scratch + 16 * b, acc[f0 + b], ld, wmma::mem_row_major);
    }
    __syncwarp();
    for (int e = lane; e < 16 * 16 * kBatch; e += 32) {
      const int r = e / (16 * kBatch), c = e % (16 * kBatch);
      f(r, 16 * f0 + c, scratch[r * ld + c]);
    }
    __syncwarp();
    if constexpr (kWriteBack) {
      for (int b = 0; b < kBatch; ++b) {
        wmma::load_matrix_sync(acc[f0 + b], scratch + 16 * b, ld, wmma::mem_row_major);
      }
      __syncwarp();
    }
  }
}

// ---- forward ----

/// Shared memory of the forward for head width kD (byte offsets; every region 32-byte aligned,
/// as wmma's pointers must be).
template <int kD>
struct ForwardLayout {
  static constexpr int kQ = 16 * kWarps;            // query rows per block
  static constexpr int kK = kD <= 64 ? 64 : 32;     // keys per tile
  static constexpr int kLd = kD + 8, kSLd = kK + 4, kPLd = kK + 8;
  static constexpr int kKeys = 0;                                // k then v: [kK][kLd] each
  static constexpr int kScores = kKeys + 2 * kK * kLd * 2;       // per warp [16][kSLd] float
  static constexpr int kProbs = kScores + kWarps * 16 * kSLd * 4;  // per warp [16][kPLd]
  static constexpr int kRowState = kProbs + kWarps * 16 * kPLd * 2;  // per warp m, l, factor
  static constexpr int kBytes = kRowState + kWarps * 3 * 16 * 4;
  static_assert(kQ * kLd <= 2 * kK * kLd, "q is staged in the k and v tiles");
  static_assert(kScores % 32 == 0 && kProbs % 32 == 0 && kRowState % 32 == 0, "alignment");
  static_assert(kBytes <= 48 * 1024, "static shared memory");
};

template <class In, int kD>
__global__ void __launch_bounds__(kThreads)
    flash_forward_mma_kernel(const In* q, const In* k, const In* v, int64_t n, int64_t l,
                             int64_t s, int64_t d, bool causal, float scale, bool vec,
                             float* out, float* lse) {
  using Tc = typename MmaType<In>::type;
  using Lay = ForwardLayout<kD>;
  constexpr int kF = kD / 16, kHalf = Lay::kK / 2;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  alignas(128) __shared__ unsigned char smem[Lay::kBytes];
  Tc* ks = reinterpret_cast<Tc*>(smem + Lay::kKeys);
  Tc* vs = ks + Lay::kK * Lay::kLd;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* sw = reinterpret_cast<float*>(smem + Lay::kScores) + warp * 16 * Lay::kSLd;
  Tc* pw = reinterpret_cast<Tc*>(smem + Lay::kProbs) + warp * 16 * Lay::kPLd;
  float* m_w = reinterpret_cast<float*>(smem + Lay::kRowState) + warp * 48;
  float* l_w = m_w + 16;
  float* factor_w = m_w + 32;
  const int64_t row_tiles = (l + Lay::kQ - 1) / Lay::kQ;
  for (int64_t task = blockIdx.x; task < n * row_tiles; task += gridDim.x) {
    const int64_t b = task / row_tiles, r0 = task % row_tiles * Lay::kQ, w0 = r0 + 16 * warp;
    const int64_t keys = keys_end(r0 + Lay::kQ, l, s, causal);
    const int64_t warp_keys = keys_end(w0 + 16, l, s, causal);
    __syncthreads();  // the previous task's readers of shared memory are done
    load_rows<kD>(q + b * l * d, r0, Lay::kQ, l, d, vec, ks);  // staged in the k, v tiles
    if (lane < 16) {
      m_w[lane] = kNegInf;
      l_w[lane] = 0.0f;
    }
    __syncthreads();
    FragA<Tc> qa[kF];
    load_operand<kD>(ks + 16 * warp * Lay::kLd, qa);
    FragC o[kF];
    for (int f = 0; f < kF; ++f) wmma::fill_fragment(o[f], 0.0f);
    for (int64_t c0 = 0; c0 < keys; c0 += Lay::kK) {
      __syncthreads();  // q is in registers; the previous tile's readers are done
      load_rows<kD>(k + b * s * d, c0, Lay::kK, s, d, vec, ks);
      load_rows<kD>(v + b * s * d, c0, Lay::kK, s, d, vec, vs);
      __syncthreads();
      if (c0 >= warp_keys) continue;  // none of this warp's rows sees these keys
      for (int j = 0; j < Lay::kK / 16; ++j) {
        product_transposed<kD>(qa, ks + 16 * j * Lay::kLd, sw + 16 * j, Lay::kSLd);
      }
      __syncwarp();
      // The online softmax: lanes 2r and 2r + 1 share row r, half of the keys each.
      const int r = lane / 2, c_begin = lane % 2 * kHalf;
      const int64_t i = w0 + r;
      float tile_max = kNegInf;
      for (int c = c_begin; c < c_begin + kHalf; ++c) {
        const float x = sw[r * Lay::kSLd + c] * scale;
        if (visible(i, c0 + c, l, s, causal) && x > tile_max) tile_max = x;
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarp, tile_max, 1));
      const float m_old = m_w[r], m_new = fmaxf(m_old, tile_max);
      float sum = 0.0f;
      for (int c = c_begin; c < c_begin + kHalf; ++c) {
        const bool seen = m_new != kNegInf && visible(i, c0 + c, l, s, causal);
        const float p = seen ? expf(sw[r * Lay::kSLd + c] * scale - m_new) : 0.0f;
        pw[r * Lay::kPLd + c] = round_to<Tc>(p);
        sum += p;
      }
      sum += __shfl_xor_sync(kFullWarp, sum, 1);
      __syncwarp();  // both lanes of the row have read m_w[r]
      if (lane % 2 == 0) {
        const float factor = m_new == kNegInf ? 1.0f : expf(m_old - m_new);  // 0 at first
        factor_w[r] = factor;
        l_w[r] = l_w[r] * factor + sum;
        m_w[r] = m_new;
      }
      __syncwarp();
      for_each_element<kD, Lay::kK / 16, true>(
          o, sw, Lay::kSLd, [&](int row, int, float& x) { x *= factor_w[row]; });
      accumulate_product<kD, Lay::kK>(pw, Lay::kPLd, vs, o);
    }
    for_each_element<kD, Lay::kK / 16, false>(o, sw, Lay::kSLd, [&](int row, int col, float& x) {
      if (w0 + row < l && col < d) {
        out[(b * l + w0 + row) * d + col] = l_w[row] > 0.0f ? x / l_w[row] : 0.0f;
      }
    });
    if (lane < 16 && w0 + lane < l) {
      lse[b * l + w0 + lane] = l_w[lane] > 0.0f ? m_w[lane] + logf(l_w[lane]) : kNegInf;
    }
  }
}

// ---- backward: dk and dv per key tile ----

template <int kD>
struct KeyValueLayout {
  static constexpr int kKeys = 16 * kWarps;  // keys per block
  static constexpr int kQ = 32;              // queries per tile
  static constexpr int kLd = kD + 8, kSLd = kQ + 4, kPLd = kQ + 8;
  static constexpr int kQs = 0;                                  // q: [kQ][kLd]
  static constexpr int kDOs = kQs + kQ * kLd * 2;                // grad_out: [kQ][kLd]
  static constexpr int kScores = kDOs + kQ * kLd * 2;            // per warp sᵀ, dpᵀ [16][kSLd]
  static constexpr int kProbs = kScores + kWarps * 2 * 16 * kSLd * 4;  // per warp pᵀ, dsᵀ
  static constexpr int kRowTerms = kProbs + kWarps * 2 * 16 * kPLd * 2;  // lse, delta [kQ]
  static constexpr int kBytes = kRowTerms + 2 * kQ * 4;
  static_assert(2 * kKeys * kLd * 2 <= kProbs, "k and v are staged before the score tiles");
  static_assert(kDOs % 32 == 0 && kScores % 32 == 0 && kProbs % 32 == 0, "alignment");
  static_assert(kBytes <= 48 * 1024, "static shared memory");
};

template <class In, int kD>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kv_mma_kernel(const In* q, const In* k, const In* v, const In* grad_out,
                                 const float* lse, const float* delta, int64_t n, int64_t l,
                                 int64_t s, int64_t d, bool causal, float scale, bool vec,
                                 float* grad_k, float* grad_v) {
  using Tc = typename MmaType<In>::type;
  using Lay = KeyValueLayout<kD>;
  constexpr int kF = kD / 16;
  alignas(128) __shared__ unsigned char smem[Lay::kBytes];
  Tc* qs = reinterpret_cast<Tc*>(smem + Lay::kQs);
  Tc* dos = reinterpret_cast<Tc*>(smem + Lay::kDOs);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* sw = reinterpret_cast<float*>(smem + Lay::kScores) + warp * 2 * 16 * Lay::kSLd;
  float* dpw = sw + 16 * Lay::kSLd;
  Tc* pw = reinterpret_cast<Tc*>(smem + Lay::kProbs) + warp * 2 * 16 * Lay::kPLd;
  Tc* dsw = pw + 16 * Lay::kPLd;
  float* lse_s = reinterpret_cast<float*>(smem + Lay::kRowTerms);
  float* delta_s = lse_s + Lay::kQ;
  const int64_t key_tiles = (s + Lay::kKeys - 1) / Lay::kKeys;
  for (int64_t task = blockIdx.x; task < n * key_tiles; task += gridDim.x) {
    const int64_t b = task / key_tiles, c0 = task % key_tiles * Lay::kKeys, j0 = c0 + 16 * warp;
    __syncthreads();  // the previous task's readers of shared memory are done
    FragA<Tc> ka[kF], va[kF];
    load_operand_pair<kD>(k + b * s * d, v + b * s * d, c0, Lay::kKeys, s, d, vec,
                          reinterpret_cast<Tc*>(smem), ka, va);
    FragC dk[kF], dv[kF];
    for (int f = 0; f < kF; ++f) {
      wmma::fill_fragment(dk[f], 0.0f);
      wmma::fill_fragment(dv[f], 0.0f);
    }
    for (int64_t r0 = causal ? c0 : 0; r0 < l; r0 += Lay::kQ) {
      __syncthreads();  // k, v are in registers; the previous tile's readers are done
      load_rows<kD>(q + b * l * d, r0, Lay::kQ, l, d, vec, qs);
      load_rows<kD>(grad_out + b * l * d, r0, Lay::kQ, l, d, vec, dos);
      if (threadIdx.x < Lay::kQ) {
        const int64_t i = r0 + threadIdx.x;
        lse_s[threadIdx.x] = i < l ? lse[b * l + i] : 0.0f;
        delta_s[threadIdx.x] = i < l ? delta[b * l + i] : 0.0f;
      }
      __syncthreads();
      if (j0 >= s || (causal && r0 + Lay::kQ <= j0)) continue;  // the warp's keys unseen here
      score_tile_pair<kD, Lay::kQ>(ka, qs, va, dos, sw, dpw, Lay::kSLd);  // sᵀ, dpᵀ
      __syncwarp();
      for (int e = lane; e < 16 * Lay::kQ; e += 32) {  // row c: key j0 + c; column r: query
        const int c = e / Lay::kQ, r = e % Lay::kQ;
        const float p = visible(r0 + r, j0 + c, l, s, causal)
                            ? expf(sw[c * Lay::kSLd + r] * scale - lse_s[r]) : 0.0f;
        pw[c * Lay::kPLd + r] = round_to<Tc>(p);
        dsw[c * Lay::kPLd + r] = round_to<Tc>(p * (dpw[c * Lay::kSLd + r] - delta_s[r]));
      }
      __syncwarp();
      accumulate_product<kD, Lay::kQ>(pw, Lay::kPLd, dos, dv);
      accumulate_product<kD, Lay::kQ>(dsw, Lay::kPLd, qs, dk);
    }
    const auto store = [&](float* dst, float factor) {
      return [&, dst, factor](int row, int col, float& x) {
        if (j0 + row < s && col < d) dst[(b * s + j0 + row) * d + col] = x * factor;
      };
    };
    for_each_element<kD, Lay::kQ / 16, false>(dk, sw, Lay::kSLd, store(grad_k, scale));
    for_each_element<kD, Lay::kQ / 16, false>(dv, sw, Lay::kSLd, store(grad_v, 1.0f));
  }
}

// ---- backward: dq per query tile ----

template <int kD>
struct QueryLayout {
  static constexpr int kQ = 16 * kWarps;  // query rows per block
  static constexpr int kK = 32;           // keys per tile
  static constexpr int kLd = kD + 8, kSLd = kK + 4, kPLd = kK + 8;
  static constexpr int kKs = 0;                                  // k: [kK][kLd]
  static constexpr int kVs = kKs + kK * kLd * 2;                 // v: [kK][kLd]
  static constexpr int kScores = kVs + kK * kLd * 2;             // per warp s, dp [16][kSLd]
  static constexpr int kGrads = kScores + kWarps * 2 * 16 * kSLd * 4;  // per warp ds [16][kPLd]
  static constexpr int kRowTerms = kGrads + kWarps * 16 * kPLd * 2;  // per warp lse, delta [16]
  static constexpr int kBytes = kRowTerms + kWarps * 2 * 16 * 4;
  static_assert(2 * kQ * kLd * 2 <= kGrads, "q and grad_out are staged before the score tiles");
  static_assert(kVs % 32 == 0 && kScores % 32 == 0 && kGrads % 32 == 0, "alignment");
  static_assert(kBytes <= 48 * 1024, "static shared memory");
};

template <class In, int kD>
__global__ void __launch_bounds__(kThreads)
    flash_backward_q_mma_kernel(const In* q, const In* k, const In* v, const In* grad_out,
                                const float* lse, const float* delta, int64_t n, int64_t l,
                                int64_t s, int64_t d, bool causal, float scale, bool vec,
                                float* grad_q) {
  using Tc = typename MmaType<In>::type;
  using Lay = QueryLayout<kD>;
  constexpr int kF = kD / 16;
  alignas(128) __shared__ unsigned char smem[Lay::kBytes];
  Tc* ks = reinterpret_cast<Tc*>(smem + Lay::kKs);
  Tc* vs = reinterpret_cast<Tc*>(smem + Lay::kVs);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* sw = reinterpret_cast<float*>(smem + Lay::kScores) + warp * 2 * 16 * Lay::kSLd;
  float* dpw = sw + 16 * Lay::kSLd;
  Tc* dsw = reinterpret_cast<Tc*>(smem + Lay::kGrads) + warp * 16 * Lay::kPLd;
  float* lse_w = reinterpret_cast<float*>(smem + Lay::kRowTerms) + warp * 32;
  float* delta_w = lse_w + 16;
  const int64_t row_tiles = (l + Lay::kQ - 1) / Lay::kQ;
  for (int64_t task = blockIdx.x; task < n * row_tiles; task += gridDim.x) {
    const int64_t b = task / row_tiles, r0 = task % row_tiles * Lay::kQ, w0 = r0 + 16 * warp;
    const int64_t keys = keys_end(r0 + Lay::kQ, l, s, causal);
    const int64_t warp_keys = keys_end(w0 + 16, l, s, causal);
    __syncthreads();  // the previous task's readers of shared memory are done
    if (lane < 16) {
      lse_w[lane] = w0 + lane < l ? lse[b * l + w0 + lane] : 0.0f;
      delta_w[lane] = w0 + lane < l ? delta[b * l + w0 + lane] : 0.0f;
    }
    FragA<Tc> qa[kF], oa[kF];
    load_operand_pair<kD>(q + b * l * d, grad_out + b * l * d, r0, Lay::kQ, l, d, vec,
                          reinterpret_cast<Tc*>(smem), qa, oa);
    FragC dq[kF];
    for (int f = 0; f < kF; ++f) wmma::fill_fragment(dq[f], 0.0f);
    for (int64_t c0 = 0; c0 < keys; c0 += Lay::kK) {
      __syncthreads();  // q, grad_out are in registers; the previous tile's readers are done
      load_rows<kD>(k + b * s * d, c0, Lay::kK, s, d, vec, ks);
      load_rows<kD>(v + b * s * d, c0, Lay::kK, s, d, vec, vs);
      __syncthreads();
      if (c0 >= warp_keys) continue;  // none of this warp's rows sees these keys
      score_tile_pair<kD, Lay::kK>(qa, ks, oa, vs, sw, dpw, Lay::kSLd);  // s, dp
      __syncwarp();
      for (int e = lane; e < 16 * Lay::kK; e += 32) {
        const int r = e / Lay::kK, c = e % Lay::kK;
        const float p = visible(w0 + r, c0 + c, l, s, causal)
                            ? expf(sw[r * Lay::kSLd + c] * scale - lse_w[r]) : 0.0f;
        dsw[r * Lay::kPLd + c] = round_to<Tc>(p * (dpw[r * Lay::kSLd + c] - delta_w[r]));
      }
      __syncwarp();
      accumulate_product<kD, Lay::kK>(dsw, Lay::kPLd, ks, dq);
    }
    for_each_element<kD, Lay::kK / 16, false>(dq, sw, Lay::kSLd, [&](int row, int col, float& x) {
      if (w0 + row < l && col < d) grad_q[(b * l + w0 + row) * d + col] = x * scale;
    });
  }
}

// ---- host side ----

/// Calls f(In{}, std::integral_constant<int, kD>{}) for the inputs' dtype and head dim.
template <class F>
void dispatch_mma(DType dtype, int64_t d, F&& f) {
  const auto width = [&](auto in_zero) {
    if (d <= 64) {
      f(in_zero, std::integral_constant<int, 64>{});
    } else {
      f(in_zero, std::integral_constant<int, 128>{});
    }
  };
  if (dtype == DType::kBFloat16) {
    width(BFloat16{});
  } else {
    width(Half{});
  }
}

/// Whether eight elements of every tensor's rows can move as one 16-byte load.
bool vector_loads(int64_t d, std::initializer_list<const Tensor*> tensors) {
  if (d % 8 != 0) return false;
  for (const Tensor* t : tensors) {
    if (reinterpret_cast<uintptr_t>(t->raw_data()) % 16 != 0) return false;
  }
  return true;
}

}  // namespace

void set_attention_tensor_cores(bool on) { g_tensor_cores = on; }
bool attention_tensor_cores() { return g_tensor_cores; }

bool tensor_core_attention_applies(DType dtype, int64_t d) {
  return g_tensor_cores && (dtype == DType::kBFloat16 || dtype == DType::kFloat16) && d >= 1 &&
         d <= 128;
}

void flash_attention_mma(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                         bool causal, Tensor& out, Tensor& lse) {
  const int64_t n = q.size(0), l = q.size(1), s = k.size(1), d = q.size(2);
  const bool vec = vector_loads(d, {&q, &k, &v});
  LaunchContext ctx(out);
  dispatch_mma(q.dtype(), d, [&](auto in_zero, auto width) {
    using In = decltype(in_zero);
    constexpr int kD = decltype(width)::value;
    const int64_t tiles = n * ((l + ForwardLayout<kD>::kQ - 1) / ForwardLayout<kD>::kQ);
    PW_LAUNCH((flash_forward_mma_kernel<In, kD>), row_grid(tiles), kThreads, 0, ctx.stream)(
        q.data<In>(), k.data<In>(), v.data<In>(), n, l, s, d, causal, static_cast<float>(scale),
        vec, out.data<float>(), lse.data<float>());
  });
  PW_CUDA_CHECK_LAUNCH("flash_forward_mma_kernel");
}

void flash_attention_backward_mma(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& grad_out, const Tensor& lse, const Tensor& delta,
                                  double scale, bool causal, Tensor& grad_q, Tensor& grad_k,
                                  Tensor& grad_v) {
  const int64_t n = q.size(0), l = q.size(1), s = k.size(1), d = q.size(2);
  const bool vec = vector_loads(d, {&q, &k, &v, &grad_out});
  const float fscale = static_cast<float>(scale);
  LaunchContext ctx(grad_q);
  dispatch_mma(q.dtype(), d, [&](auto in_zero, auto width) {
    using In = decltype(in_zero);
    constexpr int kD = decltype(width)::value;
    constexpr int kKeys = KeyValueLayout<kD>::kKeys, kQ = QueryLayout<kD>::kQ;
    PW_LAUNCH((flash_backward_kv_mma_kernel<In, kD>), row_grid(n * ((s + kKeys - 1) / kKeys)),
              kThreads, 0, ctx.stream)(q.data<In>(), k.data<In>(), v.data<In>(),
                                       grad_out.data<In>(), lse.data<float>(),
                                       delta.data<float>(), n, l, s, d, causal, fscale, vec,
                                       grad_k.data<float>(), grad_v.data<float>());
    PW_CUDA_CHECK_LAUNCH("flash_backward_kv_mma_kernel");
    PW_LAUNCH((flash_backward_q_mma_kernel<In, kD>), row_grid(n * ((l + kQ - 1) / kQ)), kThreads,
              0, ctx.stream)(q.data<In>(), k.data<In>(), v.data<In>(), grad_out.data<In>(),
                             lse.data<float>(), delta.data<float>(), n, l, s, d, causal, fscale,
                             vec, grad_q.data<float>());
    PW_CUDA_CHECK_LAUNCH("flash_backward_q_mma_kernel");
  });
}

}  // namespace pipewright::cuda
