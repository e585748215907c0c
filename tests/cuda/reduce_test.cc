// CUDA reductions against the CPU: sum / mean / max and argmax over [outer, n, inner] for
// row reductions (inner = 1), column reductions (inner > 1), long rows and empty dims; and
// under small launch caps (kSmallLaunchLimits), where 10-37 rows loop past the grid and
// ~1,000 columns wrap the column kernels' grid-stride loops.
// Tolerances: sums are added in a different order (tree vs blocks), so float32 is compared
// with rtol 1e-5 plus atol 1e-6 * n (inputs in [-1, 1]), float64 with 1e-12; max and argmax
// are exact.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "cuda_kernels/launch_limits.h"
#include "tensor/ops.h"
#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

struct Case {
  int64_t outer, n, inner;
};

const Case kCases[] = {
    {1, 1, 1},      {7, 1000, 1},  {3, 100003, 1}, {1000, 10, 1}, {1, 5, 300},
    {4, 33, 129},   {2, 1, 17},    {64, 256, 64},  {1, 1 << 20, 1},
};

// Under kSmallLaunchLimits: rows past the grid (10, 37 rows for 1-3 blocks), rows longer than
// the 32- or 64-thread block (100, 1000) and shorter than a warp (5); columns past the
// grid-stride (900, 1237 and 777 outputs for 256-768 threads).
const Case kSmallCapsCases[] = {
    {10, 100, 1}, {37, 5, 1}, {4, 1000, 1}, {3, 7, 300}, {1, 5, 1237}, {2, 1, 777},
};

/// reduce (sum, mean, max) of each case on both devices, compared.
template <size_t N>
void check_reduce_cases(const Case (&cases)[N]) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Case& c : cases) {
      const Tensor x = random_tensor({c.outer, c.n, c.inner}, dtype, 21);
      const Tensor x_gpu = x.to(gpu());
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
        INFO(dtype_name(dtype) << " [" << c.outer << ", " << c.n << ", " << c.inner << "] op "
                               << static_cast<int>(op));
        Tensor expected = Tensor::empty({c.outer, c.inner}, {dtype, Device::cpu(0)});
        Tensor actual = Tensor::empty({c.outer, c.inner}, {dtype, gpu()});
        cpu_kernels().reduce(op, x, c.outer, c.n, c.inner, expected);
        gpu_kernels().reduce(op, x_gpu, c.outer, c.n, c.inner, actual);
        if (op == ReduceOp::kMax) {
          check_bitwise_equal(actual, expected);
        } else {
          const double scale = op == ReduceOp::kSum ? static_cast<double>(c.n) : 1.0;
          check_close(actual, expected, tol(dtype, 1e-5, 1e-12),
                      tol(dtype, 1e-6, 1e-14) * scale);
        }
      }
    }
  }
}

TEST_CASE("cuda reduce matches cpu", "[cuda][reduce]") {
  if (!gpu_available_or_skip()) return;
  check_reduce_cases(kCases);
}

TEST_CASE("cuda reduce matches cpu past the grid (small launch caps)", "[cuda][reduce][limits]") {
  if (!gpu_available_or_skip()) return;
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    check_reduce_cases(kSmallCapsCases);
  }
}

TEST_CASE("cuda max propagates NaN and argmax finds it, as the cpu's do", "[cuda][reduce]") {
  if (!gpu_available_or_skip()) return;
  // A NaN in the first, a middle and the last element of each case's reduced dim (rows and
  // columns, a long row split between blocks and threads): the max is NaN on both devices
  // there and the same bits elsewhere.
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Case& c : {Case{7, 1000, 1}, Case{3, 100003, 1}, Case{4, 33, 129}, Case{1, 5, 300}}) {
      std::vector<double> values = random_tensor({c.outer, c.n, c.inner}, DType::kFloat64, 22)
                                       .to_vector<double>();
      for (int64_t o = 0; o < c.outer; ++o) {
        const int64_t k = o % 3 == 0 ? 0 : o % 3 == 1 ? c.n / 2 : c.n - 1;
        values[static_cast<size_t>((o * c.n + k) * c.inner + (o % c.inner))] = std::nan("");
      }
      const Tensor x = Tensor::from_vector(values, {c.outer, c.n, c.inner}).to(dtype);
      INFO(dtype_name(dtype) << " [" << c.outer << ", " << c.n << ", " << c.inner << "]");
      Tensor expected = Tensor::empty({c.outer, c.inner}, {dtype, Device::cpu(0)});
      Tensor actual = Tensor::empty({c.outer, c.inner}, {dtype, gpu()});
      cpu_kernels().reduce(ReduceOp::kMax, x, c.outer, c.n, c.inner, expected);
      gpu_kernels().reduce(ReduceOp::kMax, x.to(gpu()), c.outer, c.n, c.inner, actual);
      const std::vector<double> want = expected.to(DType::kFloat64).to_vector<double>();
      const std::vector<double> got = actual.to(Device::cpu(0)).to(DType::kFloat64).to_vector<double>();
      for (int64_t o = 0; o < c.outer; ++o) {
        CHECK(std::isnan(want[static_cast<size_t>(o * c.inner + o % c.inner)]));
      }
      for (size_t i = 0; i < want.size(); ++i) {
        CHECK((std::isnan(got[i]) ? std::isnan(want[i]) : got[i] == want[i]));
      }
      // argmax: the NaN's index where a column has one, the same first maximum elsewhere.
      Tensor want_index = Tensor::empty({c.outer, c.inner}, {DType::kInt64, Device::cpu(0)});
      Tensor got_index = Tensor::empty({c.outer, c.inner}, {DType::kInt64, gpu()});
      cpu_kernels().argmax(x, c.outer, c.n, c.inner, want_index);
      gpu_kernels().argmax(x.to(gpu()), c.outer, c.n, c.inner, got_index);
      const std::vector<int64_t> want_k = want_index.to_vector<int64_t>();
      CHECK(got_index.to(Device::cpu(0)).to_vector<int64_t>() == want_k);
      for (int64_t o = 0; o < c.outer; ++o) {
        CHECK(want_k[static_cast<size_t>(o * c.inner + o % c.inner)] ==
              (o % 3 == 0 ? 0 : o % 3 == 1 ? c.n / 2 : c.n - 1));
      }
    }
  }
}

// Note [Norm shares] (cuda_kernels/reduce.cu): add_norm_share_ sums the squares (magnitudes)
// in one pass with sum's order, so the total equals the unfused ops' bit for bit: short rows,
// long ones the split plan cuts in two passes, NaN and infinity.
TEST_CASE("cuda add_norm_share_ has the bits of square, sum, cast and add", "[cuda][reduce]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{100003}, int64_t{1} << 20}) {
      for (const int special : {0, 1, 2}) {  // none, a NaN, an infinity
        std::vector<double> values = random_tensor({n}, DType::kFloat64, 23, -3.0, 3.0)
                                         .to_vector<double>();
        if (special == 1) values[static_cast<size_t>(n / 2)] = std::nan("");
        if (special == 2) values[static_cast<size_t>(n - 1)] = -INFINITY;
        const Tensor x = Tensor::from_vector(values, {n}).to(dtype).to(gpu());
        for (const double p : {1.0, 2.0}) {
          INFO(dtype_name(dtype) << " n " << n << " special " << special << " p " << p);
          const Tensor start = Tensor::full({1}, 0.75, {.dtype = DType::kFloat64, .device = gpu()});
          const Tensor terms = p == 2.0 ? ops::square(x) : ops::abs(x);
          const Tensor want = ops::add(start, ops::sum(terms).to(DType::kFloat64).reshape({1}));
          Tensor got = start.clone();
          ops::add_norm_share_(got, x, p);
          const double w = want.to(Device::cpu(0)).to_vector<double>()[0];
          const double g = got.to(Device::cpu(0)).to_vector<double>()[0];
          CHECK((special == 1 ? std::isnan(g) : g == w));
          if (special != 1) CHECK(std::signbit(g) == std::signbit(w));
          if (special == 2) CHECK(g == INFINITY);
          // The CPU's composite, within the sums' reordering (rtol as cuda reduce's).
          if (special == 0) {
            Tensor cpu_total = start.to(Device::cpu(0));
            ops::add_norm_share_(cpu_total, x.to(Device::cpu(0)), p);
            CHECK(std::abs(g - cpu_total.to_vector<double>()[0]) <=
                  tol(dtype, 1e-5, 1e-12) * std::abs(g));
          }
        }
      }
    }
  }
  Tensor total = Tensor::zeros({1}, {.dtype = DType::kFloat64, .device = gpu()});
  const Tensor x = random_tensor({5}, DType::kFloat32, 3).to(gpu());
  CHECK_THROWS_WITH(ops::add_norm_share_(total, x, 3.0), Catch::Contains("p must be 1 or 2"));
  Tensor wrong = Tensor::zeros({1}, {.dtype = DType::kFloat32, .device = gpu()});
  CHECK_THROWS_WITH(ops::add_norm_share_(wrong, x, 2.0), Catch::Contains("[1] float32 on cuda:0"));
  Tensor on_cpu = Tensor::zeros({1}, {.dtype = DType::kFloat64});
  CHECK_THROWS_WITH(ops::add_norm_share_(on_cpu, x, 2.0), Catch::Contains("one element on cuda:0"));
}

TEST_CASE("cuda reduce over an empty dim: sum 0, mean NaN", "[cuda][reduce]") {
  if (!gpu_available_or_skip()) return;
  const Tensor x = Tensor::empty({3, 0, 2}, {DType::kFloat32, gpu()});
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
    Tensor expected = Tensor::empty({3, 2}, {DType::kFloat32, Device::cpu(0)});
    Tensor actual = Tensor::empty({3, 2}, {DType::kFloat32, gpu()});
    cpu_kernels().reduce(op, Tensor::empty({3, 0, 2}), 3, 0, 2, expected);
    gpu_kernels().reduce(op, x, 3, 0, 2, actual);
    check_close(actual, expected, 0.0, 0.0);  // NaN == NaN here
  }
}

/// argmax of each case on both devices (few distinct values: many ties), compared exactly.
template <size_t N>
void check_argmax_cases(const Case (&cases)[N]) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Case& c : cases) {
      // Few distinct values: many ties, so "first maximum" is really exercised.
      const Tensor x = random_tensor({c.outer, c.n, c.inner}, DType::kInt64, 22, 0, 5)
                           .to(DType::kFloat64)
                           .to(dtype);
      INFO(dtype_name(dtype) << " [" << c.outer << ", " << c.n << ", " << c.inner << "]");
      Tensor expected = Tensor::empty({c.outer, c.inner}, {DType::kInt64, Device::cpu(0)});
      Tensor actual = Tensor::empty({c.outer, c.inner}, {DType::kInt64, gpu()});
      cpu_kernels().argmax(x, c.outer, c.n, c.inner, expected);
      gpu_kernels().argmax(x.to(gpu()), c.outer, c.n, c.inner, actual);
      check_bitwise_equal(actual, expected);
    }
  }
}

TEST_CASE("cuda argmax matches cpu, first maximum on ties", "[cuda][reduce]") {
  if (!gpu_available_or_skip()) return;
  check_argmax_cases(kCases);
}

TEST_CASE("cuda argmax matches cpu past the grid (small launch caps)", "[cuda][reduce][limits]") {
  if (!gpu_available_or_skip()) return;
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    check_argmax_cases(kSmallCapsCases);
  }
}

}  // namespace
}  // namespace pipewright::testing
