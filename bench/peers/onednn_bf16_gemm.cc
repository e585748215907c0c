// Does a bf16 GEMM pay on this CPU? oneDNN's bf16 × bf16 -> f32 matmul (Debian's libdnnl-dev,
// AMX or AVX512-BF16 where the CPU has them) against OpenBLAS's float32 sgemm, which is what
// pipewright's CPU GEMM runs for 16-bit operands today (they are widened first: Note
// [Mixed-precision GEMM on the CPU], tensor/cpu/gemm.cc). Issue 41, part 6. Not part of the
// build: oneDNN is not a project dependency until this says it should be.
//
//   apt-get install libdnnl-dev libopenblas-dev
//   g++ -O2 -std=c++17 bench/peers/onednn_bf16_gemm.cc -o /tmp/onednn_bf16_gemm \
//       -ldnnl -lopenblas
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /tmp/onednn_bf16_gemm   (then 2 and 2)
//
// Each line: C [M, N] = A [M, K] · B [K, N], row-major; median of 15 timed runs after 3
// warm-ups; GFLOP/s = 2MNK / time. The bf16 column counts the matmul alone (operands already
// bf16, as the precision policy's weight working copies are); "+ convert" adds converting A
// from float32, as an activation would be, with oneDNN's reorder. The ratio is sgemm's time
// over bf16's (> 1: bf16 faster). The last column is the largest |difference| from sgemm
// over the products' magnitudes (bf16's 8-bit mantissas: about 1e-2).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <vector>

namespace {

using dnnl::memory;

template <class F>
double median_ms(F&& f) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < 15; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  std::printf("oneDNN %d.%d.%d, ISA %d (dnnl_cpu_isa_t)\n", dnnl_version()->major,
              dnnl_version()->minor, dnnl_version()->patch,
              static_cast<int>(dnnl::get_effective_cpu_isa()));
  std::printf("| M | K | N | sgemm ms | bf16 ms | bf16 + convert ms | sgemm ÷ bf16 | sgemm ÷ "
              "(bf16 + convert) | max rel diff |\n|---|---|---|---|---|---|---|---|---|\n");
  struct Shape {
    int64_t m, k, n;
  };
  // char_gpt's (dim 128, 4 stages × chunks 8 of 32 windows × 128 characters: M = 512) and
  // GPT-2 small's (dim 768, qkv and MLP) products.
  const Shape shapes[] = {{512, 128, 384},  {512, 128, 512},   {512, 512, 128},
                          {2048, 768, 2304}, {2048, 768, 3072}, {2048, 3072, 768}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (const Shape& s : shapes) {
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n), c16(s.m * s.n);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    const double sgemm = median_ms([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k, 1.f, a.data(), s.k,
                  b.data(), s.n, 0.f, c.data(), s.n);
    });

    const memory::desc a32({s.m, s.k}, memory::data_type::f32, memory::format_tag::ab);
    const memory::desc a16({s.m, s.k}, memory::data_type::bf16, memory::format_tag::ab);
    const memory::desc b32({s.k, s.n}, memory::data_type::f32, memory::format_tag::ab);
    const memory::desc b16({s.k, s.n}, memory::data_type::bf16, memory::format_tag::ab);
    const memory::desc c32({s.m, s.n}, memory::data_type::f32, memory::format_tag::ab);
    memory a_f32(a32, engine, a.data()), b_f32(b32, engine, b.data());
    memory a_bf16(a16, engine), b_bf16(b16, engine), c_f32(c32, engine, c16.data());
    dnnl::reorder(a_f32, a_bf16).execute(stream, a_f32, a_bf16);
    dnnl::reorder(b_f32, b_bf16).execute(stream, b_f32, b_bf16);
    stream.wait();
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a16, b16, c32), engine);
    const dnnl::matmul matmul(pd);
    const dnnl::reorder convert_a(a_f32, a_bf16);
    auto run_bf16 = [&] {
      matmul.execute(stream, {{DNNL_ARG_SRC, a_bf16}, {DNNL_ARG_WEIGHTS, b_bf16},
                              {DNNL_ARG_DST, c_f32}});
      stream.wait();
    };
    const double bf16 = median_ms(run_bf16);
    const double converted = median_ms([&] {
      convert_a.execute(stream, a_f32, a_bf16);
      run_bf16();
    });
    double worst = 0, scale = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(c[i] - c16[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(c[i])));
    }
    std::printf("| %lld | %lld | %lld | %.3f | %.3f | %.3f | %.2f | %.2f | %.1e |\n",
                static_cast<long long>(s.m), static_cast<long long>(s.k),
                static_cast<long long>(s.n), sgemm, bf16, converted, sgemm / bf16,
                sgemm / converted, worst / scale);
  }
  return 0;
}
