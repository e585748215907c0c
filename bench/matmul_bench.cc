// GEMM throughput: pipewright's ops::matmul and ops::gemm_ against raw Eigen on the same
// shapes, in the same binary, for op(A)·op(B) with A·B, Aᵀ·B and A·Bᵀ.
//
//   ours_matmul/MxKxN/AB   ops::matmul (allocates the [M, N] result every call)
//   ours_gemm/MxKxN/AB     ops::gemm_ into a preallocated result
//   eigen/MxKxN/AB         C.noalias() = A * B on Eigen::MatrixXf (column-major, Eigen's default)
//   eigen_rowmajor/...     the same on row-major Eigen matrices: the layout of our tensors, so
//                          ours / eigen_rowmajor is the cost of our wrapper alone
//
//   peak/fma               the machine's measured fp32 peak: independent FMA chains on every
//                          OpenMP thread, at the vector width the build targets (AVX2: 8
//                          floats; AVX-512 under --config=native: 16). GEMM GFLOP/s are
//                          quoted against this number in docs/BENCHMARKS.md.
//
// The "FLOPS" counter is 2·M·N·K per call as a rate (shown as G/s = GFLOP/s).
// Shapes: the MLP's layers at batch 256 (256x784x1024, 256x1024x1024), one of its micro-batches
// at chunks 8 (32x1024x1024), and 1024³.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <Eigen/Core>
#include <string>

#include "tensor/generator.h"
#include "tensor/ops.h"

namespace pipewright {
namespace {

struct Gemm {
  int64_t m, k, n;
  bool trans_a, trans_b;
  std::string name() const {
    return std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) + "/" +
           (trans_a ? "AtB" : trans_b ? "ABt" : "AB");
  }
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * k; }
  /// Stored shapes of A and B: op(A) is [m, k], op(B) is [k, n].
  Shape a_shape() const { return trans_a ? Shape{k, m} : Shape{m, k}; }
  Shape b_shape() const { return trans_b ? Shape{n, k} : Shape{k, n}; }
};

void set_flops(benchmark::State& state, const Gemm& g) {
  state.counters["FLOPS"] = benchmark::Counter(
      g.flops() * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

Tensor random(const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  default_generator().uniform_(t, -1.0, 1.0);
  return t;
}

void ours_matmul(benchmark::State& state, Gemm g) {
  const Tensor a = random(g.a_shape()), b = random(g.b_shape());
  for (auto _ : state) {
    Tensor c = ops::matmul(a, b, g.trans_a, g.trans_b);
    benchmark::DoNotOptimize(c.raw_data());
  }
  set_flops(state, g);
}

void ours_gemm(benchmark::State& state, Gemm g) {
  const Tensor a = random(g.a_shape()), b = random(g.b_shape());
  Tensor c = Tensor::empty({g.m, g.n});
  for (auto _ : state) {
    ops::gemm_(c, a, b, g.trans_a, g.trans_b);
    benchmark::DoNotOptimize(c.raw_data());
    benchmark::ClobberMemory();
  }
  set_flops(state, g);
}

template <int Order>
void eigen(benchmark::State& state, Gemm g) {
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Order>;
  const Matrix a = Matrix::Random(g.a_shape()[0], g.a_shape()[1]);
  const Matrix b = Matrix::Random(g.b_shape()[0], g.b_shape()[1]);
  Matrix c(g.m, g.n);
  for (auto _ : state) {
    if (g.trans_a) {
      c.noalias() = a.transpose() * b;
    } else if (g.trans_b) {
      c.noalias() = a * b.transpose();
    } else {
      c.noalias() = a * b;
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, g);
}

// Peak fp32 throughput: each thread runs kChains independent fused multiply-adds per step, so
// the FMA units never wait for a previous result (latency 4 cycles x 2 ports = 8 chains
// needed; 12 leaves margin). 2 FLOPs per lane per FMA.
#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16;
inline Vec vec_set1(float x) { return _mm512_set1_ps(x); }
inline Vec vec_fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float vec_first(Vec v) { return _mm512_cvtss_f32(v); }
#else
using Vec = __m256;
constexpr int kLanes = 8;
inline Vec vec_set1(float x) { return _mm256_set1_ps(x); }
inline Vec vec_fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float vec_first(Vec v) { return _mm256_cvtss_f32(v); }
#endif

void peak_fma(benchmark::State& state) {
  constexpr int kChains = 12;
  constexpr int64_t kSteps = 1 << 20;
  const int threads = omp_get_max_threads();
  for (auto _ : state) {
    float sink = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      Vec acc[kChains];
      for (int i = 0; i < kChains; ++i) acc[i] = vec_set1(0.001f * static_cast<float>(i));
      const Vec a = vec_set1(0.999999f), b = vec_set1(1e-7f);
      for (int64_t step = 0; step < kSteps; ++step) {
        for (int i = 0; i < kChains; ++i) acc[i] = vec_fma(acc[i], a, b);
      }
      for (int i = 0; i < kChains; ++i) sink += vec_first(acc[i]);
    }
    benchmark::DoNotOptimize(sink);
  }
  state.counters["threads"] = threads;
  state.counters["FLOPS"] = benchmark::Counter(
      2.0 * kLanes * kChains * static_cast<double>(kSteps) * threads *
          static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

bool register_all() {
  benchmark::RegisterBenchmark("peak/fma", peak_fma)->UseRealTime()->Unit(benchmark::kMillisecond);
  const int64_t shapes[][3] = {
      {32, 1024, 1024}, {256, 784, 1024}, {256, 1024, 1024}, {1024, 1024, 1024}};
  for (const auto& s : shapes) {
    for (auto [ta, tb] : {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}}) {
      const Gemm g{s[0], s[1], s[2], ta, tb};
      benchmark::RegisterBenchmark(("ours_matmul/" + g.name()).c_str(), ours_matmul, g)
          ->UseRealTime()->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("ours_gemm/" + g.name()).c_str(), ours_gemm, g)
          ->UseRealTime()->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("eigen/" + g.name()).c_str(), eigen<Eigen::ColMajor>, g)
          ->UseRealTime()->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("eigen_rowmajor/" + g.name()).c_str(),
                                   eigen<Eigen::RowMajor>, g)
          ->UseRealTime()->Unit(benchmark::kMillisecond);
    }
  }
  return true;
}

const bool registered = register_all();

}  // namespace
}  // namespace pipewright

BENCHMARK_MAIN();
