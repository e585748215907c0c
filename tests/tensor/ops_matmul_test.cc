// matmul / gemm_ against a naive triple loop, all four transpose cases, float32 and float64.
#include <catch2/catch.hpp>
#include <cmath>
#include <type_traits>

#include "tensor/batched_matmul.h"
#include "tensor/cpu/gemm.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops.h"
#include "tensor/threads.h"
#include "tests/compare.h"
#include "tests/tensor/test_util.h"

using namespace pipewright;
using namespace pipewright::testing;

namespace {

/// (i, j) of op(x) for a row-major [rows, cols] x.
double at(const std::vector<double>& x, int64_t cols, bool trans, int64_t i, int64_t j) {
  return trans ? x[j * cols + i] : x[i * cols + j];
}

/// alpha * op(a) op(b) + beta * c, naive, in double.
std::vector<double> naive_gemm(const std::vector<double>& a, const Shape& as, bool ta,
                               const std::vector<double>& b, const Shape& bs, bool tb,
                               double alpha, double beta, const std::vector<double>& c) {
  const int64_t m = ta ? as[1] : as[0], k = ta ? as[0] : as[1], n = tb ? bs[0] : bs[1];
  std::vector<double> out(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) acc += at(a, as[1], ta, i, p) * at(b, bs[1], tb, p, j);
      out[i * n + j] = alpha * acc + (beta == 0.0 ? 0.0 : beta * c[i * n + j]);
    }
  }
  return out;
}

Shape stored(int64_t rows, int64_t cols, bool trans) {
  return trans ? Shape{cols, rows} : Shape{rows, cols};
}

}  // namespace

TEMPLATE_TEST_CASE("matmul: all transpose cases match the triple loop", "[matmul]", float,
                   double) {
  struct Dims {
    int64_t m, k, n;
  };
  for (Dims d : {Dims{3, 4, 5}, Dims{17, 33, 9}, Dims{64, 128, 96}, Dims{1, 7, 1},
                 Dims{8, 40, 24}, Dims{9, 40, 24}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        INFO("m=" << d.m << " k=" << d.k << " n=" << d.n << " ta=" << ta << " tb=" << tb);
        const Shape as = stored(d.m, d.k, ta), bs = stored(d.k, d.n, tb);
        const auto av = random_values(as.numel(), 21), bv = random_values(bs.numel(), 22);
        const Tensor c = ops::matmul(tensor_of<TestType>(av, as), tensor_of<TestType>(bv, bs),
                                     ta, tb);
        REQUIRE(c.shape() == Shape{d.m, d.n});
        const auto expected = naive_gemm(rounded<TestType>(av), as, ta, rounded<TestType>(bv), bs,
                                         tb, 1.0, 0.0, {});
        // Error grows with k for float32 accumulation.
        REQUIRE(max_rel_err(c.template to_vector<double>(), expected) <
                tolerance<TestType>() * std::sqrt(static_cast<double>(d.k)));
      }
    }
  }
}

TEMPLATE_TEST_CASE("gemm_ accumulates alpha * op(a) op(b) + beta * c", "[matmul]", float,
                   double) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Shape as = stored(6, 5, ta), bs = stored(5, 4, tb);
      const auto av = random_values(30, 23), bv = random_values(20, 24), cv = random_values(24, 25);
      const Tensor a = tensor_of<TestType>(av, as), b = tensor_of<TestType>(bv, bs);
      for (double beta : {0.0, 1.0, -0.5}) {
        INFO("ta=" << ta << " tb=" << tb << " beta=" << beta);
        Tensor c = tensor_of<TestType>(cv, {6, 4});
        ops::gemm_(c, a, b, ta, tb, 2.0, beta);
        const auto expected = naive_gemm(rounded<TestType>(av), as, ta, rounded<TestType>(bv), bs,
                                         tb, 2.0, beta, rounded<TestType>(cv));
        REQUIRE(max_rel_err(c.template to_vector<double>(), expected) < tolerance<TestType>());
      }
    }
  }
}

TEMPLATE_TEST_CASE("gemm_ split over two intra-op threads matches the triple loop", "[matmul]",
                   float, double) {
  // Large enough to be split (tensor/cpu/gemm.cc, Note [GEMM backend]): along N in blocks of 16
  // columns with a ragged last one (n = 70), and along M (m = 129 > n), every layout and beta;
  // and with 8 rows (Eigen's path, Note [Few rows]) split along N (n = 700, ragged).
  ThreadBudgetGuard threads(2);
  struct Dims {
    int64_t m, k, n;
  };
  for (Dims d : {Dims{40, 300, 70}, Dims{129, 100, 50}, Dims{8, 300, 700}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const Shape as = stored(d.m, d.k, ta), bs = stored(d.k, d.n, tb);
        const auto av = random_values(as.numel(), 31), bv = random_values(bs.numel(), 32);
        const auto cv = random_values(d.m * d.n, 33);
        const Tensor a = tensor_of<TestType>(av, as), b = tensor_of<TestType>(bv, bs);
        for (double beta : {0.0, 1.0, -0.5}) {
          INFO("m=" << d.m << " k=" << d.k << " n=" << d.n << " ta=" << ta << " tb=" << tb
                    << " beta=" << beta);
          Tensor c = tensor_of<TestType>(cv, {d.m, d.n});
          ops::gemm_(c, a, b, ta, tb, 2.0, beta);
          const auto expected = naive_gemm(rounded<TestType>(av), as, ta, rounded<TestType>(bv), bs,
                                           tb, 2.0, beta, rounded<TestType>(cv));
          REQUIRE(max_rel_err(c.template to_vector<double>(), expected) <
                  tolerance<TestType>() * std::sqrt(static_cast<double>(d.k)));
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("the Eigen GEMM backend matches the triple loop, split and unsplit, and rounds otherwise than OpenBLAS",
                   "[matmul]", float, double) {
  // Every product through Eigen (tensor/cpu/gemm.h), on one thread and split over two along N
  // (n >= m) and along M (m > n), every layout and beta.
  struct Dims {
    int64_t m, k, n;
  };
  bool some_product_differs = false;
  for (int threads : {1, 2}) {
    ThreadBudgetGuard budget(threads);
    for (Dims d : {Dims{40, 300, 70}, Dims{129, 100, 50}, Dims{17, 33, 9}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          const Shape as = stored(d.m, d.k, ta), bs = stored(d.k, d.n, tb);
          const auto av = random_values(as.numel(), 41), bv = random_values(bs.numel(), 42);
          const auto cv = random_values(d.m * d.n, 43);
          const Tensor a = tensor_of<TestType>(av, as), b = tensor_of<TestType>(bv, bs);
          for (double beta : {0.0, 1.0, -0.5}) {
            INFO("threads=" << threads << " m=" << d.m << " k=" << d.k << " n=" << d.n
                            << " ta=" << ta << " tb=" << tb << " beta=" << beta);
            Tensor eigen = tensor_of<TestType>(cv, {d.m, d.n});
            Tensor openblas = tensor_of<TestType>(cv, {d.m, d.n});
            {
              cpu::GemmBackendGuard backend(cpu::GemmBackend::kEigen);
              ops::gemm_(eigen, a, b, ta, tb, 2.0, beta);
            }
            ops::gemm_(openblas, a, b, ta, tb, 2.0, beta);
            const auto expected = naive_gemm(rounded<TestType>(av), as, ta, rounded<TestType>(bv),
                                             bs, tb, 2.0, beta, rounded<TestType>(cv));
            REQUIRE(max_rel_err(eigen.template to_vector<double>(), expected) <
                    tolerance<TestType>() * std::sqrt(static_cast<double>(d.k)));
            if (!ops::equal(eigen, openblas)) some_product_differs = true;
          }
        }
      }
    }
  }
  CHECK(cpu::gemm_backend() == cpu::GemmBackend::kOpenBlas);  // the guard restored it
  // Two implementations really ran: their float32 sums differ somewhere in the last bits.
  if (std::is_same_v<TestType, float>) CHECK(some_product_differs);
}

TEST_CASE("gemm_ with k = 0 scales c by beta, and clears it for beta = 0") {
  Tensor c = Tensor::full({2, 3}, 4.0);
  ops::gemm_(c, Tensor::ones({2, 0}), Tensor::ones({0, 3}), false, false, 1.0, 0.5);
  REQUIRE(c.to_vector<float>() == std::vector<float>(6, 2.0f));
  c = Tensor::full({2, 3}, NAN);
  ops::gemm_(c, Tensor::ones({2, 0}), Tensor::ones({0, 3}), false, false, 1.0, 0.0);
  REQUIRE(c.to_vector<float>() == std::vector<float>(6, 0.0f));
}

TEST_CASE("gemm_ with beta = 0 ignores NaN in c") {
  Tensor c = Tensor::full({2, 2}, NAN);
  ops::gemm_(c, Tensor::ones({2, 3}), Tensor::ones({3, 2}), false, false);
  REQUIRE(c.to_vector<float>() == std::vector<float>(4, 3.0f));
}

TEST_CASE("matmul accepts non-contiguous operands") {
  const Tensor a = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  // transposed_view(a) is aᵀ as a strided view: aᵀ·a == matmul(a, a, true, false).
  REQUIRE(ops::equal(ops::matmul(transposed_view(a), a), ops::matmul(a, a, true, false)));
  // Worked by hand: (aᵀa)_ij = Σ_k a_ki a_kj.
  const std::vector<double> expected = {17, 22, 27, 22, 29, 36, 27, 36, 45};
  REQUIRE(ops::matmul(transposed_view(a), a).to_vector<double>() == expected);
}

TEST_CASE("matmul errors name both shapes and the flags") {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  REQUIRE_THROWS_AS(ops::matmul(a, b), std::invalid_argument);
  REQUIRE_THROWS_WITH(ops::matmul(a, b), Catch::Contains("[2, 3]") && Catch::Contains("[4, 5]") &&
                                             Catch::Contains("trans_a=false") &&
                                             Catch::Contains("trans_b=false"));
  REQUIRE_THROWS_WITH(ops::matmul(a, b, true, true), Catch::Contains("trans_a=true"));
  REQUIRE_THROWS_WITH(ops::matmul(Tensor::zeros({2}), b), Catch::Contains("2-D"));
  REQUIRE_THROWS_WITH(ops::matmul(a, Tensor::zeros({3, 2}, {DType::kFloat64})),
                      Catch::Contains("float32") && Catch::Contains("float64"));
  Tensor c = Tensor::zeros({3, 3});
  REQUIRE_THROWS_WITH(ops::gemm_(c, a, Tensor::zeros({3, 2}), false, false),
                      Catch::Contains("[3, 3]") && Catch::Contains("[2, 2]"));
}

/// A tensor of `shape` with values uniform in [-2, 2) from `seed`, rounded to bfloat16.
static Tensor random_bf16(const Shape& shape, uint32_t seed) {
  return random_tensor<float>(shape, seed, -2, 2).to(DType::kBFloat16);
}

/// The bfloat16 GEMMs this CPU runs (gemm.h): always the widened one, and the kernels of ours
/// that its instructions allow.
static std::vector<cpu::Bf16Gemm> bf16_kernels() {
  std::vector<cpu::Bf16Gemm> kernels;
  for (auto kernel : {cpu::Bf16Gemm::kWidened, cpu::Bf16Gemm::kAvx512Bf16, cpu::Bf16Gemm::kAmx}) {
    if (cpu::bf16_gemm_available(kernel)) kernels.push_back(kernel);
  }
  return kernels;
}

TEST_CASE("bfloat16 operands: float32 sums of exact products, by every kernel this CPU has") {
  // Each product of two bf16 values is exact in float32 and the sums are float32, so C is
  // within K float32 roundings of the float64 product of the bf16 values (γ_K Σ|terms|,
  // Higham §3.1), by each kernel (tensor/cpu/gemm.h: AMX tiles, VDPBF16PS, widened to float32)
  // and by the Eigen backend's widened product. Shapes cross the kernels' 32-row, 32-column
  // and 32-deep blocks; batches share an operand; two threads split C.
  for (cpu::Bf16Gemm kernel : bf16_kernels()) {
    cpu::Bf16GemmGuard use(kernel);
    INFO("bf16 kernel " << cpu::to_string(kernel));
    struct Dims {
      int64_t m, k, n;
    };
    bool some_product_differs = false;
    for (int threads : {1, 2}) {
      ThreadBudgetGuard budget(threads);
      for (Dims d : {Dims{1, 1, 1}, Dims{5, 7, 3}, Dims{33, 65, 17}, Dims{64, 96, 128},
                     Dims{129, 300, 50}}) {
        for (bool ta : {false, true}) {
          for (bool tb : {false, true}) {
            const Shape as = stored(d.m, d.k, ta), bs = stored(d.k, d.n, tb);
            const Tensor a = random_bf16(as, 51);
            const Tensor b = random_bf16(bs, 52);
            const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
            const auto cv = random_values(d.m * d.n, 53);
            // |terms| summed, for the bound.
            std::vector<double> abs_a(av), abs_b(bv);
            for (double& x : abs_a) x = std::abs(x);
            for (double& x : abs_b) x = std::abs(x);
            const auto magnitude = naive_gemm(abs_a, as, ta, abs_b, bs, tb, 1.0, 0.0, {});
            for (double beta : {0.0, 1.0}) {
              INFO("threads=" << threads << " m=" << d.m << " k=" << d.k << " n=" << d.n
                              << " ta=" << ta << " tb=" << tb << " beta=" << beta);
              Tensor tiles = tensor_of<float>(cv, {d.m, d.n});
              Tensor widened = tensor_of<float>(cv, {d.m, d.n});
              ops::gemm_(tiles, a, b, ta, tb, 1.0, beta);
              {
                cpu::GemmBackendGuard backend(cpu::GemmBackend::kEigen);
                ops::gemm_(widened, a, b, ta, tb, 1.0, beta);
              }
              const auto expected =
                  naive_gemm(av, as, ta, bv, bs, tb, 1.0, beta, rounded<float>(cv));
              const auto got = tiles.to_vector<double>(), reference = widened.to_vector<double>();
              for (size_t i = 0; i < expected.size(); ++i) {
                const double bound = (static_cast<double>(d.k) + 2) * std::ldexp(1.0, -24) *
                                     (magnitude[i] + std::abs(expected[i]) + 1.0);
                REQUIRE(std::abs(got[i] - expected[i]) <= bound);
                REQUIRE(std::abs(reference[i] - expected[i]) <= bound);
              }
              if (!ops::equal(tiles, widened)) some_product_differs = true;
            }
          }
        }
      }
    }
    // Products larger than the kernel packs at once (about 2^20 elements of each operand): K
    // 1000 packs 1024 rows of A or columns of B at a time. One thread: two would split C first.
    for (bool wide : {false, true}) {
      ThreadBudgetGuard budget(1);
      const int64_t m = wide ? 40 : 1100, k = 1000, n = wide ? 1100 : 40;
      INFO("m=" << m << " n=" << n << " k=" << k);
      const Tensor a = tensor_of<float>(random_values(m * k, 56), {m, k}).to(DType::kBFloat16);
      const Tensor b = tensor_of<float>(random_values(n * k, 57), {n, k}).to(DType::kBFloat16);
      const Tensor c = ops::matmul(a, b, false, true);
      const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
      const auto expected = naive_gemm(av, {m, k}, false, bv, {n, k}, true, 1.0, 0.0, {});
      const auto got = c.to_vector<double>();
      for (size_t i = 0; i < expected.size(); ++i) {
        REQUIRE(std::abs(got[i] - expected[i]) <= (k + 2) * std::ldexp(1.0, -24) * (k + 1.0));
      }
    }
    // A batched product with a shared operand: each matrix as its own product.
    const Tensor x = tensor_of<float>(random_values(3 * 40 * 70, 54), {3, 40, 70})
                         .to(DType::kBFloat16);
    const Tensor w = tensor_of<float>(random_values(70 * 33, 55), {1, 70, 33}).to(DType::kBFloat16);
    Tensor stack = ops::batched_matmul(x, w);
    for (int64_t i = 0; i < 3; ++i) {
      const Tensor one = ops::matmul(x.slice(i, i + 1).reshape({40, 70}), w.reshape({70, 33}));
      CHECK(ops::equal(stack.slice(i, i + 1).reshape({40, 33}), one));
    }
    // Where a kernel of ours ran, two implementations really did: some sums differ in the last
    // bits from the reference's.
    if (kernel != cpu::Bf16Gemm::kWidened) CHECK(some_product_differs);
  }
}

TEST_CASE("bfloat16 kernels of ours: a row's bits do not depend on the rows or threads beside it") {
  // Note [bf16 GEMM blocks] (tensor/cpu/gemm_bf16.cc): each element of C is summed over K in an
  // order fixed by K alone, so a micro-batch's rows of a product equal the whole batch's bit
  // for bit (what lets a pipelined bf16 step match the plain model's), and two threads
  // splitting C change nothing.
  const int64_t m = 70, k = 100, n = 45;
  for (cpu::Bf16Gemm kernel : bf16_kernels()) {
    if (kernel == cpu::Bf16Gemm::kWidened) continue;  // OpenBLAS promises no such thing
    cpu::Bf16GemmGuard use(kernel);
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        INFO("bf16 kernel " << cpu::to_string(kernel) << " ta=" << ta << " tb=" << tb);
        const Shape as = stored(m, k, ta), bs = stored(k, n, tb);
        const Tensor a = random_bf16(as, 61);
        const Tensor b = random_bf16(bs, 62);
        Tensor whole = Tensor::zeros({m, n});
        {
          ThreadBudgetGuard budget(1);
          ops::gemm_(whole, a, b, ta, tb);
        }
        const auto expected = whole.to_vector<float>();
        const auto av = a.to_vector<double>();
        // The rows of op(A) in three pieces (each a product of its own), one thread.
        for (auto [lo, hi] : {std::pair<int64_t, int64_t>{0, 13}, {13, 50}, {50, 70}}) {
          std::vector<double> piece;  // rows [lo, hi) of op(A), stored as A is
          const Shape ps = stored(hi - lo, k, ta);
          for (int64_t r = 0; r < ps[0]; ++r) {
            for (int64_t c = 0; c < ps[1]; ++c) {
              piece.push_back(ta ? av[r * m + lo + c] : av[(lo + r) * k + c]);
            }
          }
          const Tensor rows = tensor_of<float>(piece, ps).to(DType::kBFloat16);
          Tensor part = Tensor::zeros({hi - lo, n});
          ThreadBudgetGuard budget(1);
          ops::gemm_(part, rows, b, ta, tb);
          const auto got = part.to_vector<float>();
          for (int64_t i = 0; i < (hi - lo) * n; ++i) {
            INFO("rows [" << lo << ", " << hi << ") element " << i);
            REQUIRE(got[i] == expected[lo * n + i]);
          }
        }
        // Two threads, each its block of C.
        Tensor split = Tensor::zeros({m, n});
        ThreadBudgetGuard budget(2);
        ops::gemm_(split, a, b, ta, tb);
        CHECK(ops::equal(split, whole));
      }
    }
  }
}

TEST_CASE("bfloat16 kernels of ours: packing buffers reused by a thread carry nothing into K's "
          "padding") {
  // Note [bf16 GEMM blocks]: a thread's packing buffers are reused and only K's padding is
  // cleared. A product with k = 64 fills them with infinities; then products whose k leaves a
  // padded last block (odd k: the last pair's second value is padding, inf · 0 a NaN; AMX
  // multiplies the whole tile) must still give the sums of their own values.
  for (cpu::Bf16Gemm kernel : bf16_kernels()) {
    if (kernel == cpu::Bf16Gemm::kWidened) continue;
    cpu::Bf16GemmGuard use(kernel);
    ThreadBudgetGuard budget(1);
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (int64_t k : {1, 7, 31, 33, 63}) {
          INFO("bf16 kernel " << cpu::to_string(kernel) << " ta=" << ta << " tb=" << tb
                              << " k=" << k);
          const int64_t m = 40, n = 36;
          const Tensor fill_a = Tensor::full(stored(m, 64, ta), INFINITY).to(DType::kBFloat16);
          const Tensor fill_b = Tensor::full(stored(64, n, tb), -INFINITY).to(DType::kBFloat16);
          Tensor scratch = Tensor::zeros({m, n});
          ops::gemm_(scratch, fill_a, fill_b, ta, tb);
          const Shape as = stored(m, k, ta), bs = stored(k, n, tb);
          const Tensor a = random_bf16(as, 71);
          const Tensor b = random_bf16(bs, 72);
          Tensor c = Tensor::zeros({m, n});
          ops::gemm_(c, a, b, ta, tb);
          const auto expected = naive_gemm(a.to_vector<double>(), as, ta, b.to_vector<double>(),
                                           bs, tb, 1.0, 0.0, {});
          const auto got = c.to_vector<double>();
          for (size_t i = 0; i < expected.size(); ++i) {
            REQUIRE(std::abs(got[i] - expected[i]) <= (k + 2) * std::ldexp(1.0, -24) * 4.0 * k);
          }
        }
      }
    }
  }
}

TEST_CASE("the bfloat16 kernel is chosen by name, and one this CPU lacks is refused") {
  CHECK(cpu::bf16_gemm_available(cpu::Bf16Gemm::kWidened));
  CHECK(std::string(cpu::to_string(cpu::Bf16Gemm::kAvx512Bf16)) == "avx512-bf16");
  const cpu::Bf16Gemm before = cpu::bf16_gemm();
  {
    cpu::Bf16GemmGuard widened(cpu::Bf16Gemm::kWidened);
    CHECK(cpu::bf16_gemm() == cpu::Bf16Gemm::kWidened);
  }
  CHECK(cpu::bf16_gemm() == before);
  for (auto kernel : {cpu::Bf16Gemm::kAvx512Bf16, cpu::Bf16Gemm::kAmx}) {
    if (cpu::bf16_gemm_available(kernel)) continue;
    REQUIRE_THROWS_WITH(cpu::set_bf16_gemm(kernel),
                        Catch::Contains(cpu::to_string(kernel)) && Catch::Contains("widened"));
    CHECK(cpu::bf16_gemm() == before);
  }
}

TEST_CASE("float32 matmul precision: torch's names, clear errors, the CPU's products unchanged",
          "[matmul]") {
  CHECK(float32_matmul_precision() == Float32MatmulPrecision::kHighest);  // the default
  for (const Float32MatmulPrecision p :
       {Float32MatmulPrecision::kHighest, Float32MatmulPrecision::kHigh}) {
    CHECK(float32_matmul_precision_from_name(float32_matmul_precision_name(p)) == p);
  }
  CHECK(float32_matmul_precision_name(Float32MatmulPrecision::kHigh) == "high");
  CHECK_THROWS_WITH(float32_matmul_precision_from_name("HIGH"),
                    "float32 matmul precision 'HIGH': expected 'highest' (float32) or 'high' "
                    "(TF32)");
  CHECK_THROWS_WITH(float32_matmul_precision_from_name("medium"),
                    Catch::Contains("'medium' (bfloat16 inside float32 products) is not offered") &&
                        Catch::Contains("--precision bf16"));
  // "high" is for GPUs: OpenBLAS's float32 products stay as they are, bit for bit.
  const Tensor a = random_tensor<float>({33, 65}, 61), b = random_tensor<float>({65, 17}, 62);
  const Tensor highest = ops::matmul(a, b);
  set_float32_matmul_precision(Float32MatmulPrecision::kHigh);
  CHECK(float32_matmul_precision() == Float32MatmulPrecision::kHigh);
  const Tensor high = ops::matmul(a, b);
  set_float32_matmul_precision(Float32MatmulPrecision::kHighest);
  CHECK(testing::bitwise_equal(high, highest));
}
