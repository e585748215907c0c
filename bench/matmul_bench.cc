// GEMM throughput at the shapes Linear runs, for the GEMM backend choice (tensor/cpu/gemm.cc,
// Note [GEMM backend]; docs/BENCHMARKS.md, "GEMM backend"). Every library in one binary, on the
// same row-major operands, 1 and 2 threads:
//
//   ours/tN/...            ops::gemm_ into a preallocated result, intra-op threads = N
//   eigen/tN/...           C.noalias() = op(A) * op(B) on row-major Eigen maps (the backend
//                          before OpenBLAS), OpenMP threads = N, at the build's ISA (AVX2)
//   openblas/tN/...        cblas_sgemm with OpenBLAS's own threads = N (its runtime-dispatched
//                          kernels: AVX-512 on this CPU unless OPENBLAS_CORETYPE says otherwise)
//   bf16-K/tN/...          ops::gemm_ of bfloat16 operands into float32 by the bf16 kernel K
//                          (cpu::Bf16Gemm, tensor/cpu/gemm.h), each this CPU has: amx (our
//                          AMX tile kernel), avx512-bf16 (our VDPBF16PS kernel), widened (both
//                          operands widened to float32 inside the call, then ours)
//   blis/tN/...            bli_sgemm (Debian's BLIS, OpenMP), threads = N; loaded with
//                          dlopen(RTLD_LOCAL) so its CBLAS symbols never replace OpenBLAS's
//                          (ours would then run on BLIS); skipped when the library is absent
//
// Shapes: Linear(in, out) at micro-batch rows r uses three GEMMs —
//   fwd   y = x·Wᵀ        r × in × out      A·Bᵀ
//   dx    gx = gy·W       r × out × in      A·B
//   dW    gW = gyᵀ·x      out × r × in      Aᵀ·B
// for (in, out) = (784, 512), (512, 512) (the main job's layers), (1024, 1024) (the issue's)
// and r = 8, 32, 64, 128, 256; plus 1024³ as a large reference. The "FLOPS" counter is
// 2·M·N·K per call as a rate (G/s = GFLOP/s). peak/fma is the machine's fp32 FMA throughput at
// the build's vector width.
//
//   tools/bazel build //bench:matmul_bench
//   bazel-bin/bench/matmul_bench --benchmark_min_time=0.05 --benchmark_repetitions=3
//       --benchmark_report_aggregates_only=true --benchmark_enable_random_interleaving=true
// OpenBLAS's cblas.h first: blis.h carries a CBLAS of its own under the same include guard.
#include <cblas.h>
// (keep this order)
#include <benchmark/benchmark.h>
#include <blis.h>
#include <dlfcn.h>
#include <immintrin.h>
#include <omp.h>

#include <Eigen/Core>
#include <string>
#include <tuple>

#include "tensor/generator.h"
#include "tensor/cpu/gemm.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

namespace pipewright {
namespace {

struct Gemm {
  std::string label;  // fwd, dx, dW, big, or a transformer's product (gpt-*, gpt2-*)
  int64_t m, k, n;
  bool trans_a, trans_b;
  std::string name() const {
    return std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) + "/" +
           (trans_a   ? "AtB"
            : trans_b ? "ABt"
                      : "AB") +
           "/" + label;
  }
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * k; }
  /// Stored shapes of A and B: op(A) is [m, k], op(B) is [k, n].
  Shape a_shape() const { return trans_a ? Shape{k, m} : Shape{m, k}; }
  Shape b_shape() const { return trans_b ? Shape{n, k} : Shape{k, n}; }
};

void set_flops(benchmark::State& state, const Gemm& g) {
  state.counters["FLOPS"] = benchmark::Counter(g.flops() * static_cast<double>(state.iterations()),
                                               benchmark::Counter::kIsRate);
}

Tensor random(const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  default_generator().uniform_(t, -1.0, 1.0);
  return t;
}

struct Operands {
  Tensor a, b, c;
  explicit Operands(const Gemm& g)
      : a(random(g.a_shape())), b(random(g.b_shape())), c(Tensor::zeros({g.m, g.n})) {}
};

void ours(benchmark::State& state, Gemm g, int threads) {
  ThreadBudgetGuard budget(threads);
  Operands x(g);
  for (auto _ : state) {
    ops::gemm_(x.c, x.a, x.b, g.trans_a, g.trans_b);
    benchmark::ClobberMemory();
  }
  set_flops(state, g);
}

void bf16(benchmark::State& state, Gemm g, int threads, cpu::Bf16Gemm kernel) {
  ThreadBudgetGuard budget(threads);
  cpu::Bf16GemmGuard use(kernel);
  Operands x(g);
  const Tensor a = x.a.to(DType::kBFloat16), b = x.b.to(DType::kBFloat16);
  for (auto _ : state) {
    ops::gemm_(x.c, a, b, g.trans_a, g.trans_b);
    benchmark::ClobberMemory();
  }
  set_flops(state, g);
}

void eigen(benchmark::State& state, Gemm g, int threads) {
  ThreadBudgetGuard budget(threads);
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Operands x(g);
  Eigen::Map<const Matrix> a(x.a.data<float>(), x.a.size(0), x.a.size(1));
  Eigen::Map<const Matrix> b(x.b.data<float>(), x.b.size(0), x.b.size(1));
  Eigen::Map<Matrix> c(x.c.data<float>(), g.m, g.n);
  for (auto _ : state) {
    if (g.trans_a) {
      c.noalias() = a.transpose() * b;
    } else if (g.trans_b) {
      c.noalias() = a * b.transpose();
    } else {
      c.noalias() = a * b;
    }
    benchmark::ClobberMemory();
  }
  set_flops(state, g);
}

void openblas(benchmark::State& state, Gemm g, int threads) {
  Operands x(g);
  openblas_set_num_threads(threads);
  const blasint lda = static_cast<blasint>(x.a.size(1)), ldb = static_cast<blasint>(x.b.size(1));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
                g.trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(g.m),
                static_cast<blasint>(g.n), static_cast<blasint>(g.k), 1.0f, x.a.data<float>(), lda,
                x.b.data<float>(), ldb, 0.0f, x.c.data<float>(), static_cast<blasint>(g.n));
    benchmark::ClobberMemory();
  }
  openblas_set_num_threads(1);  // what ours expects (tensor/cpu/gemm.cc)
  set_flops(state, g);
}

// BLIS, resolved at run time (see the top of this file).
struct Blis {
  decltype(&bli_sgemm) sgemm = nullptr;
  decltype(&bli_thread_set_num_threads) set_num_threads = nullptr;
  std::string arch = "absent";

  Blis() {
    void* lib = dlopen("/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    sgemm = reinterpret_cast<decltype(sgemm)>(dlsym(lib, "bli_sgemm"));
    set_num_threads =
        reinterpret_cast<decltype(set_num_threads)>(dlsym(lib, "bli_thread_set_num_threads"));
    auto query = reinterpret_cast<decltype(&bli_arch_query_id)>(dlsym(lib, "bli_arch_query_id"));
    auto name = reinterpret_cast<decltype(&bli_arch_string)>(dlsym(lib, "bli_arch_string"));
    if (query != nullptr && name != nullptr) arch = name(query());
  }
};

const Blis& blis_lib() {
  static const Blis lib;
  return lib;
}

void blis(benchmark::State& state, Gemm g, int threads) {
  Operands x(g);
  const Blis& lib = blis_lib();
  lib.set_num_threads(threads);
  float one = 1.0f, zero = 0.0f;
  const inc_t lda = x.a.size(1), ldb = x.b.size(1);
  for (auto _ : state) {
    lib.sgemm(g.trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
              g.trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, g.m, g.n, g.k, &one,
              x.a.data<float>(), lda, 1, x.b.data<float>(), ldb, 1, &zero, x.c.data<float>(), g.n,
              1);
    benchmark::ClobberMemory();
  }
  set_flops(state, g);
}

// Peak fp32 throughput: each thread runs kChains independent fused multiply-adds per step, so
// the FMA units never wait for a previous result (latency 4 cycles x 2 ports = 8 chains
// needed; 12 leaves margin). 2 FLOPs per lane per FMA. The build's vector width (AVX2: 8
// floats; AVX-512 under --config=native: 16).
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
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * kLanes * kChains * static_cast<double>(kSteps) * threads *
                             static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

std::vector<Gemm> linear_gemms() {
  std::vector<Gemm> gemms;
  const int64_t layers[][2] = {{784, 512}, {512, 512}, {1024, 1024}};
  for (const auto& [in, out] : layers) {
    for (int64_t rows : {8, 32, 64, 128, 256}) {
      gemms.push_back({"fwd", rows, in, out, false, true});
      gemms.push_back({"dx", rows, out, in, false, false});
      gemms.push_back({"dW", out, rows, in, true, false});
    }
  }
  gemms.push_back({"big", 1024, 1024, 1024, false, false});
  // The transformers' forward products, x · Wᵀ: the char GPT's (a 512-token micro-batch, width
  // 128: qkv, MLP up, MLP down) and GPT-2 small's (2048 tokens, width 768).
  for (const auto& [label, m, k, n] : {std::tuple<const char*, int64_t, int64_t, int64_t>{
                                           "gpt-qkv", 512, 128, 384},
                                       {"gpt-up", 512, 128, 512},
                                       {"gpt-down", 512, 512, 128},
                                       {"gpt2-qkv", 2048, 768, 2304},
                                       {"gpt2-up", 2048, 768, 3072},
                                       {"gpt2-down", 2048, 3072, 768}}) {
    gemms.push_back({label, m, k, n, false, true});
  }
  return gemms;
}

bool register_all() {
  std::printf("openblas: %s (%s); blis: %s\n", openblas_get_corename(), openblas_get_config(),
              blis_lib().arch.c_str());
  benchmark::RegisterBenchmark("peak/fma", peak_fma)->UseRealTime()->Unit(benchmark::kMillisecond);
  for (const Gemm& g : linear_gemms()) {
    for (int threads : {1, 2}) {
      const std::string suffix = "/t" + std::to_string(threads) + "/" + g.name();
      benchmark::RegisterBenchmark(("ours" + suffix).c_str(), ours, g, threads)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
      for (auto kernel :
           {cpu::Bf16Gemm::kAmx, cpu::Bf16Gemm::kAvx512Bf16, cpu::Bf16Gemm::kWidened}) {
        if (!cpu::bf16_gemm_available(kernel)) continue;
        const std::string name = std::string("bf16-") + cpu::to_string(kernel) + suffix;
        benchmark::RegisterBenchmark(name.c_str(), bf16, g, threads, kernel)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
      benchmark::RegisterBenchmark(("eigen" + suffix).c_str(), eigen, g, threads)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("openblas" + suffix).c_str(), openblas, g, threads)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
      if (blis_lib().sgemm != nullptr && blis_lib().set_num_threads != nullptr) {
        benchmark::RegisterBenchmark(("blis" + suffix).c_str(), blis, g, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  return true;
}

const bool registered = register_all();

}  // namespace
}  // namespace pipewright

BENCHMARK_MAIN();
