// BatchNorm's per-channel sums, split over enough blocks to fill the GPU, and the vector
// accesses its passes share. Included by batch_norm.cu (the layouts and formulas are in its
// file comment) and by layer_norm.cu, whose weight gradients are per-column sums of the same
// kind (L = 1: C = the normalized width, N = the rows; NormWeightMoments).
//
// Every sum is over the M = N * L values of a channel, two sums at once (Sums::a, Sums::b), in
// double. The grid is (channel groups) x (splits): block (i, s) adds split s of its channels'
// values and writes its partial sums to partial[2][splits][C] (a, then b); the caller's
// finalize kernel adds the splits in order 0, 1, ... (deterministic, no atomics).
//
//   L == 1 (tiled):  block (lanes, rows) = (32, 8) or, for C / V < 32 units, (C / V rounded up
//                    to a power of two, 256 / lanes); thread (tx, ty) owns the V channels of unit
//                    tile * lanes + tx and adds rows ty, ty + rows, ... of its split; neighbouring
//                    threads read neighbouring units of a row (coalesced). Shared memory adds the
//                    row lanes in order.
//   L >  1 (runs):   one channel per block (x), its N runs of L contiguous values seen as units
//                    j = sample * (L / V) + pos, split into ranges of units (y); thread t takes
//                    j = begin + t, t + 256, ... (Note [Channel walk]); a block reduction adds them.
//
// Units: V consecutive elements (V = 16 / sizeof(T), 2 or 1: the widest that divides the run,
// C for L == 1 or L otherwise, and every pointer's alignment), loaded as one access.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "cuda_kernels/device_guard.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda::bn {

// ---- vector units ----

/// V consecutive elements of T, read or written as one 4- to 16-byte access.
template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <int V, class T>
__device__ inline Vec<T, V> load(const T* p, int64_t unit) {
  return reinterpret_cast<const Vec<T, V>*>(p)[unit];
}

template <int V, class T>
__device__ inline void store(T* p, int64_t unit, const Vec<T, V>& v) {
  reinterpret_cast<Vec<T, V>*>(p)[unit] = v;
}

/// The widest V (at most 16 bytes) that divides `run` and whose access size every pointer's
/// address is a multiple of (null pointers aside).
template <class T>
int vector_width(int64_t run, std::initializer_list<const void*> pointers) {
  for (int v = 16 / static_cast<int>(sizeof(T)); v > 1; v /= 2) {
    bool fits = run % v == 0;
    for (const void* p : pointers) {
      fits = fits && reinterpret_cast<uintptr_t>(p) % (v * sizeof(T)) == 0;
    }
    if (fits) return v;
  }
  return 1;
}

/// Calls f(std::integral_constant<int, V>{}) for v = 4, 2 or 1 (4 only for 4-byte T).
template <class T, class F>
void dispatch_width(int v, F&& f) {
  if constexpr (sizeof(T) == 4) {
    if (v == 4) return f(std::integral_constant<int, 4>{});
  }
  if (v == 2) return f(std::integral_constant<int, 2>{});
  f(std::integral_constant<int, 1>{});
}

// ---- what to add ----

struct Sums {
  double a = 0.0, b = 0.0;
};

/// Forward: the shifted moments (x - K, (x - K)²), K = the channel's first value x[0, ch, 0]
/// (Note [Shifted sums] in batch_norm.cu).
template <class T, int V>
struct ShiftedMoments {
  const T* x;
  int64_t l;
  struct Loaded {
    Vec<T, V> x;
  };
  __device__ double channel(int64_t ch) const { return static_cast<double>(x[ch * l]); }
  __device__ Loaded load(int64_t unit) const { return {bn::load<V>(x, unit)}; }
  __device__ static void add(Sums* s, const Loaded& v, const double* k) {
    for (int i = 0; i < V; ++i) {
      const double d = static_cast<double>(v.x.v[i]) - k[i];
      s[i].a += d;
      s[i].b += d * d;
    }
  }
};

/// Backward: (g, g (x - mean)); Σ g x̂ = invstd Σ g (x - mean).
template <class T, int V>
struct GradientMoments {
  const T* g;
  const T* x;
  const T* mean;
  struct Loaded {
    Vec<T, V> g, x;
  };
  __device__ double channel(int64_t ch) const { return static_cast<double>(mean[ch]); }
  __device__ Loaded load(int64_t unit) const {
    return {bn::load<V>(g, unit), bn::load<V>(x, unit)};
  }
  __device__ static void add(Sums* s, const Loaded& v, const double* k) {
    for (int i = 0; i < V; ++i) {
      const double gd = static_cast<double>(v.g.v[i]);
      s[i].a += gd;
      s[i].b += gd * (static_cast<double>(v.x.v[i]) - k[i]);
    }
  }
};

/// LayerNorm / RMSNorm's weight gradients: (Σ g x̂, Σ g) per column of [rows, C], with
/// x̂ = (x - mean[row]) · rstd[row] (mean null: RMSNorm, x̂ = x · rstd[row]). L = 1 only (the
/// tiled sums): a unit's row is unit / (C / V).
template <class T, int V>
struct NormWeightMoments {
  const T* g;
  const T* x;
  const T* mean;  // null for RMSNorm
  const T* rstd;
  int64_t units_per_row;  // C / V
  struct Loaded {
    Vec<T, V> g, x;
    double mean, rstd;
  };
  __device__ double channel(int64_t) const { return 0.0; }
  __device__ Loaded load(int64_t unit) const {
    const int64_t row = unit / units_per_row;
    return {bn::load<V>(g, unit), bn::load<V>(x, unit),
            mean != nullptr ? static_cast<double>(mean[row]) : 0.0,
            static_cast<double>(rstd[row])};
  }
  __device__ static void add(Sums* s, const Loaded& v, const double*) {
    for (int i = 0; i < V; ++i) {
      const double gd = static_cast<double>(v.g.v[i]);
      s[i].a += gd * ((static_cast<double>(v.x.v[i]) - v.mean) * v.rstd);
      s[i].b += gd;
    }
  }
};

/// Adds split s = 0, 1, ... of partial[2][splits][c] for channel ch (the finalize kernels').
__device__ inline Sums add_splits(const double* partial, int64_t splits, int64_t c,
                                  int64_t ch) {
  Sums s;
  for (int64_t i = 0; i < splits; ++i) {
    s.a += partial[i * c + ch];
    s.b += partial[(splits + i) * c + ch];
  }
  return s;
}

constexpr int kUnroll = 4;  // units loaded before they are added: more bytes in flight
// Sums grid: at most this many blocks per SM, so that they run in one wave (the kernels are
// bounded to the registers that lets fit).
constexpr int kSumBlocksPerSm = 4;

// ---- L == 1: tiles of units x row lanes ----

template <int V, class Term>
__global__ void __launch_bounds__(kBlock, kSumBlocksPerSm)
    channel_sums_tiled(Term term, int64_t n, int64_t c, int64_t rows_per_split,
                                   double* partial) {
  __shared__ double shared[2][kBlock * V];  // [a | b][row lane][lane, element of the unit]
  const int tx = threadIdx.x, ty = threadIdx.y, lanes = blockDim.x, rows = blockDim.y;
  const int64_t units = c / V, split = blockIdx.y, splits = gridDim.y;
  const int64_t begin = split * rows_per_split;
  const int64_t end = begin + rows_per_split < n ? begin + rows_per_split : n;
  for (int64_t tile = static_cast<int64_t>(blockIdx.x) * lanes; tile < units;
       tile += static_cast<int64_t>(gridDim.x) * lanes) {
    const int64_t u = tile + tx;
    Sums s[V];
    if (u < units) {
      double k[V];
      for (int i = 0; i < V; ++i) k[i] = term.channel(u * V + i);
      int64_t row = begin + ty;
      for (; row + (kUnroll - 1) * rows < end; row += kUnroll * rows) {
        typename Term::Loaded v[kUnroll];
        for (int q = 0; q < kUnroll; ++q) v[q] = term.load((row + q * rows) * units + u);
        for (int q = 0; q < kUnroll; ++q) Term::add(s, v[q], k);
      }
      for (; row < end; row += rows) Term::add(s, term.load(row * units + u), k);
    }
    for (int i = 0; i < V; ++i) {
      shared[0][(ty * lanes + tx) * V + i] = s[i].a;
      shared[1][(ty * lanes + tx) * V + i] = s[i].b;
    }
    __syncthreads();
    if (ty == 0 && u < units) {
      for (int i = 0; i < V; ++i) {
        double a = 0.0, b = 0.0;
        for (int r = 0; r < rows; ++r) {
          a += shared[0][(r * lanes + tx) * V + i];
          b += shared[1][(r * lanes + tx) * V + i];
        }
        partial[split * c + u * V + i] = a;
        partial[(splits + split) * c + u * V + i] = b;
      }
    }
    __syncthreads();  // `shared` is rewritten by the next tile
  }
}

// ---- L > 1: one channel's runs per block ----

// Note [Channel walk]: unit j of a channel (j = sample * run + pos, run = L / V units) lies at
// unit offset sample * C * run + ch * run + pos. Thread t starts at j = begin + t, dividing
// once; each step of blockDim.x units adds blockDim.x / run samples and blockDim.x % run
// positions, and one more sample when pos passes the end of the run. No division per element.

template <int V, class Term>
__global__ void __launch_bounds__(kBlock, kSumBlocksPerSm)
    channel_sums_runs(Term term, int64_t n, int64_t c, int64_t run,
                                  int64_t units_per_split, double* partial) {
  __shared__ double shared[32];
  const int64_t split = blockIdx.y, splits = gridDim.y, plane = c * run, step = blockDim.x;
  const int64_t begin = split * units_per_split;
  const int64_t end = begin + units_per_split < n * run ? begin + units_per_split : n * run;
  const int64_t first = begin + threadIdx.x;
  const int64_t step_samples = step / run, step_pos = step % run;
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    Sums s[V];
    double k[V];
    for (int i = 0; i < V; ++i) k[i] = term.channel(ch);
    int64_t pos = first % run, offset = first / run * plane + ch * run + pos;
    const auto advance = [&] {
      pos += step_pos;
      offset += step_samples * plane + step_pos;
      if (pos >= run) {
        pos -= run;
        offset += plane - run;
      }
    };
    int64_t j = first;
    for (; j + (kUnroll - 1) * step < end; j += kUnroll * step) {
      typename Term::Loaded v[kUnroll];
      for (int q = 0; q < kUnroll; ++q) {
        v[q] = term.load(offset);
        advance();
      }
      for (int q = 0; q < kUnroll; ++q) Term::add(s, v[q], k);
    }
    for (; j < end; j += step) {
      Term::add(s, term.load(offset), k);
      advance();
    }
    for (int i = 1; i < V; ++i) {
      s[0].a += s[i].a;
      s[0].b += s[i].b;
    }
    const double a = block_sum(s[0].a, shared);
    const double b = block_sum(s[0].b, shared);
    if (threadIdx.x == 0) {
      partial[split * c + ch] = a;
      partial[(splits + split) * c + ch] = b;
    }
  }
}

// ---- the plan ----

constexpr int kMinUnitsPerThread = kUnroll;  // at least this much work per thread and split

/// Grid and block of a sums launch, and how the values are split.
struct SumsPlan {
  dim3 grid, block;
  int64_t per_split;  // rows (tiled) or units (runs) per split
  int64_t splits;     // gridDim.y; 0 when M = 0 (nothing to launch)
};

inline SumsPlan plan_sums(int64_t n, int64_t c, int64_t l, int v, int device) {
  SumsPlan plan{};
  int64_t groups = c, values = n * l / v, min_per_split = kBlock * kMinUnitsPerThread;
  plan.block = dim3(kBlock);
  if (l == 1) {
    const int64_t units = c / v;
    int lanes = 1;
    while (lanes < units && lanes < 32) lanes *= 2;
    plan.block = dim3(lanes, kBlock / lanes);
    groups = (units + lanes - 1) / lanes;
    values = n;
    min_per_split = (kBlock / lanes) * kMinUnitsPerThread;
  }
  if (values == 0) return plan;
  const int64_t cap = launch_limits().max_grid;
  const int64_t most = (values + min_per_split - 1) / min_per_split;
  // Rounded down: one wave of equal blocks.
  const int64_t splits = ranges_to_fill(groups, most, kSumBlocksPerSm, device);
  plan.per_split = (values + splits - 1) / splits;
  plan.splits = (values + plan.per_split - 1) / plan.per_split;  // none empty
  plan.grid = dim3(static_cast<unsigned>(groups < cap ? groups : cap),
                   static_cast<unsigned>(plan.splits));
  return plan;
}

/// Launches the sums of `term` (a ShiftedMoments or GradientMoments of width V) into
/// partial[2][plan.splits][c]. Nothing to do when plan.splits == 0.
template <int V, class Term>
void launch_sums(const Term& term, const SumsPlan& plan, int64_t n, int64_t c, int64_t l,
                 double* partial, cudaStream_t stream) {
  if (plan.splits == 0) return;
  if (l == 1) {
    PW_LAUNCH((channel_sums_tiled<V, Term>), plan.grid, plan.block, 0, stream)(
        term, n, c, plan.per_split, partial);
  } else {
    PW_LAUNCH((channel_sums_runs<V, Term>), plan.grid, plan.block, 0, stream)(
        term, n, c, l / V, plan.per_split, partial);
  }
  PW_CUDA_CHECK_LAUNCH(l == 1 ? "channel_sums_tiled" : "channel_sums_runs");
}

}  // namespace pipewright::cuda::bn
