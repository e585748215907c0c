// The transformer ops against naive loops in double: views (transpose, permute, expand),
// batched_matmul with broadcasting, masked_fill / tril / triu / causal_mask, causal_softmax
// (also against the unfused ops it replaces), erf and GELU, LayerNorm / RMSNorm and their
// backward, index_add_. Float32 and float64, one and two intra-op threads where the kernels
// split work.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "tensor/batched_matmul.h"
#include "tensor/gelu.h"
#include "tensor/index_add.h"
#include "tensor/masking.h"
#include "tensor/normalization.h"
#include "tensor/ops.h"
#include "tensor/threads.h"
#include "tensor/views.h"
#include "tests/compare.h"
#include "tests/tensor/test_util.h"

using namespace pipewright;
using namespace pipewright::testing;

namespace {

/// Row-major index of `idx` in `shape`.
int64_t flat(const Shape& shape, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (int64_t d = 0; d < shape.rank(); ++d) f = f * shape[d] + idx[static_cast<size_t>(d)];
  return f;
}

/// Multi-index of row-major position f in `shape`.
std::vector<int64_t> unflat(const Shape& shape, int64_t f) {
  std::vector<int64_t> idx(static_cast<size_t>(shape.rank()));
  for (int64_t d = shape.rank() - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = f % shape[d];
    f /= shape[d];
  }
  return idx;
}

}  // namespace

TEST_CASE("transpose and permute are views with the elements moved", "[views]") {
  const Shape s{2, 3, 4};
  const std::vector<double> v = random_values(s.numel(), 1);
  const Tensor x = tensor_of<double>(v, s);
  const Tensor p = ops::permute(x, {2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.shares_storage(x));
  CHECK_FALSE(p.is_contiguous());
  const std::vector<double> got = p.contiguous().to_vector<double>();
  for (int64_t f = 0; f < p.numel(); ++f) {
    const std::vector<int64_t> i = unflat(p.shape(), f);  // p[a, b, c] = x[b, c, a]
    CHECK(got[f] == v[flat(s, {i[1], i[2], i[0]})]);
  }
  const Tensor t = ops::transpose(x, -1, 0);  // [4, 3, 2]: t[a, b, c] = x[c, b, a]
  const std::vector<double> tv = t.contiguous().to_vector<double>();
  for (int64_t f = 0; f < t.numel(); ++f) {
    const std::vector<int64_t> i = unflat(t.shape(), f);
    CHECK(tv[f] == v[flat(s, {i[2], i[1], i[0]})]);
  }
  CHECK_THROWS_WITH(ops::permute(x, {0, 0, 1}),
                    "permute: dims [0, 0, 1] is not a permutation of the dims of [2, 3, 4] "
                    "float64 on cpu:0");
  CHECK_THROWS_AS(ops::permute(x, {0, 1}), std::invalid_argument);
  CHECK_THROWS_AS(ops::transpose(x, 0, 3), std::out_of_range);
}

TEST_CASE("contiguous() of large permuted views, split across threads", "[views]") {
  const Shape s{20, 33, 3, 64};  // as attention's [B, T, 3, D] before its heads are split
  const std::vector<double> v = random_values(s.numel(), 15);
  const Tensor x = tensor_of<float>(v, s);
  const std::vector<double> xr = rounded<float>(v);
  for (int threads : {1, 2}) {
    ThreadBudgetGuard budget(threads);
    // Last dim kept (rows copied whole), and last dim moved (element by element).
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{2, 0, 1, 3}, {3, 1, 0, 2}}) {
      INFO("threads " << threads << " dims " << dims[0] << dims[1] << dims[2] << dims[3]);
      const Tensor p = ops::permute(x, dims);
      const std::vector<double> got = p.contiguous().to_vector<double>();
      bool equal = true;
      for (int64_t f = 0; f < p.numel() && equal; ++f) {
        const std::vector<int64_t> i = unflat(p.shape(), f);
        std::vector<int64_t> src(4);
        for (size_t k = 0; k < 4; ++k) src[static_cast<size_t>(dims[k])] = i[k];
        equal = got[f] == xr[flat(s, src)];
      }
      CHECK(equal);
    }
  }
}

TEST_CASE("expand repeats with stride 0 and refuses other sizes", "[views]") {
  const Tensor x = Tensor::from_vector<double>({1, 2, 3}, Shape{3, 1});
  const Tensor e = ops::expand(x, Shape{2, 3, 2});
  CHECK(e.strides() == std::vector<int64_t>{0, 1, 0});
  CHECK(e.contiguous().to_vector<double>() ==
        std::vector<double>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
  CHECK(ops::expand(x, Shape{-1, 4}).shape() == Shape{3, 4});
  CHECK_THROWS_WITH(ops::expand(x, Shape{2, 2}),
                    "expand: cannot expand [3, 1] float64 on cpu:0 to [2, 2]");
}

TEMPLATE_TEST_CASE("batched_matmul equals per-matrix products, with broadcasting", "[matmul]",
                   float, double) {
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4, 5}, {2, 3, 5, 6}, false, false},  // attention-like stacks
      {{2, 3, 5, 4}, {2, 3, 6, 5}, true, true},    // both transposed in place
      {{2, 1, 4, 5}, {3, 5, 6}, false, false},     // broadcast both ways: [2, 3, 4, 6]
      {{7, 4, 5}, {5, 6}, false, false},           // one shared matrix (stride 0)
      {{4, 5}, {3, 6, 5}, false, true},            // the other one shared
      {{3, 40, 33}, {3, 33, 17}, false, false},    // rows past the few-rows path
  };
  for (int threads : {1, 2}) {
    ThreadBudgetGuard budget(threads);
    for (const Case& c : cases) {
      INFO("a " << c.a << " b " << c.b << " ta " << c.ta << " tb " << c.tb << " threads "
                << threads);
      const std::vector<double> av = random_values(c.a.numel(), 2), bv = random_values(c.b.numel(), 3);
      const Tensor y = ops::batched_matmul(tensor_of<TestType>(av, c.a), tensor_of<TestType>(bv, c.b),
                                           c.ta, c.tb);
      const int64_t m = y.size(-2), n = y.size(-1), k = c.ta ? c.a[-2] : c.a[-1];
      const std::vector<double> got = y.to_vector<double>();
      std::vector<double> want(got.size());
      for (int64_t f = 0; f < y.numel(); ++f) {
        std::vector<int64_t> i = unflat(y.shape(), f);
        const int64_t row = i[i.size() - 2], col = i.back();
        // The operand's own multi-index: trailing dims of the batch, size-1 dims pinned to 0.
        auto index_of = [&](const Shape& s, int64_t r, int64_t cidx) {
          std::vector<int64_t> idx(static_cast<size_t>(s.rank()));
          for (int64_t d = 0; d + 2 < s.rank(); ++d) {
            const int64_t yd = d + (y.dim() - s.rank());
            idx[static_cast<size_t>(d)] = s[d] == 1 ? 0 : i[static_cast<size_t>(yd)];
          }
          idx[idx.size() - 2] = r;
          idx.back() = cidx;
          return flat(s, idx);
        };
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = av[index_of(c.a, c.ta ? p : row, c.ta ? row : p)];
          const double w = bv[index_of(c.b, c.tb ? col : p, c.tb ? p : col)];
          acc += static_cast<double>(static_cast<TestType>(x)) * static_cast<TestType>(w);
        }
        want[f] = acc;
      }
      CHECK(m == (c.ta ? c.a[-1] : c.a[-2]));
      CHECK(n == (c.tb ? c.b[-2] : c.b[-1]));
      CHECK(max_rel_err(got, want) < tolerance<TestType>());
    }
  }
}

TEST_CASE("batched_matmul names the shapes it refuses", "[matmul]") {
  const Tensor a = Tensor::zeros({2, 3, 4}), b = Tensor::zeros({3, 5, 6});
  CHECK_THROWS_WITH(ops::batched_matmul(a, b),
                    "batched_matmul: inner sizes differ (4 vs 5): [2, 3, 4] float32 on cpu:0 · "
                    "[3, 5, 6] float32 on cpu:0 (trans_a=false, trans_b=false)");
  CHECK_THROWS_WITH(ops::batched_matmul(a, Tensor::zeros({3, 4, 6})),
                    Catch::Contains("leading dims do not broadcast"));
  CHECK_THROWS_WITH(ops::batched_matmul(Tensor::zeros({4}), b),
                    Catch::Contains("expected operands of rank >= 2"));
}

TEMPLATE_TEST_CASE("masked_fill, tril, triu and causal_mask", "[masking]", float, double) {
  const Shape s{2, 3, 4};
  const std::vector<double> v = random_values(s.numel(), 4);
  const Tensor x = tensor_of<TestType>(v, s);
  const std::vector<double> tl = ops::tril(x, 1).to_vector<double>();
  const std::vector<double> tu = ops::triu(x, -1).to_vector<double>();
  const std::vector<double> mask_v = random_values(12, 5);
  std::vector<double> mask01;
  for (double m : mask_v) mask01.push_back(m > 0 ? 1.0 : 0.0);
  const Tensor mask = tensor_of<int64_t>(mask01, Shape{3, 4});
  const std::vector<double> filled = ops::masked_fill(x, mask, -7.5).to_vector<double>();
  const std::vector<double> xr = rounded<TestType>(v);
  for (int64_t f = 0; f < s.numel(); ++f) {
    const std::vector<int64_t> i = unflat(s, f);
    CHECK(tl[f] == (i[2] - i[1] <= 1 ? xr[f] : 0.0));
    CHECK(tu[f] == (i[2] - i[1] >= -1 ? xr[f] : 0.0));
    CHECK(filled[f] == (mask01[f % 12] != 0 ? -7.5 : xr[f]));
  }
  CHECK(ops::causal_mask(2, 3).to_vector<double>() == std::vector<double>{0, 1, 1, 0, 0, 1});
  CHECK_THROWS_WITH(ops::masked_fill(x, Tensor::zeros({4, 3}), 0.0),
                    Catch::Contains("the mask must have x's shape or x's trailing dims"));
  CHECK_THROWS_AS(ops::tril(Tensor::zeros({3})), std::invalid_argument);
}

TEMPLATE_TEST_CASE("causal_softmax equals the masked softmax it fuses", "[masking]", float,
                   double) {
  for (int threads : {1, 2}) {
    ThreadBudgetGuard budget(threads);
    for (const Shape& s : {Shape{2, 3, 5, 5}, Shape{4, 7}, Shape{3, 6, 4}, Shape{1, 130, 130}}) {
      INFO(s << " threads " << threads);
      const double scale = 0.37;
      const std::vector<double> v = random_values(s.numel(), 6, -4, 4);
      const Tensor x = tensor_of<TestType>(v, s);
      const Tensor y = ops::causal_softmax(x, scale);
      const Tensor mask = ops::causal_mask(s[-2], s[-1], {x.dtype(), x.device()});
      const Tensor reference = ops::softmax(
          ops::masked_fill(ops::mul(x, scale), mask, -std::numeric_limits<double>::infinity()));
      CHECK(max_rel_err(y.to_vector<double>(), reference.to_vector<double>()) <
            tolerance<TestType>());
      // Row i of each matrix: weights over keys j <= i sum to 1, later keys are exactly 0.
      const std::vector<double> yv = y.to_vector<double>();
      const int64_t rows = s[-2], cols = s[-1];
      for (int64_t r = 0; r < s.numel() / cols; ++r) {
        double sum = 0.0;
        for (int64_t j = 0; j < cols; ++j) {
          if (j > r % rows) CHECK(yv[r * cols + j] == 0.0);
          sum += yv[r * cols + j];
        }
        CHECK(std::abs(sum - 1.0) < tolerance<TestType>() * cols);
      }
    }
  }
}

TEMPLATE_TEST_CASE("erf and gelu match the C library's erf and tanh", "[gelu]", float, double) {
  const std::vector<double> v = random_values(3000, 7, -6, 6);
  const Tensor x = tensor_of<TestType>(v, Shape{3000});
  const std::vector<double> xr = rounded<TestType>(v);
  const std::vector<double> e = ops::erf(x).to_vector<double>();
  const std::vector<double> exact = ops::gelu(x).to_vector<double>();
  const std::vector<double> approx = ops::gelu(x, true).to_vector<double>();
  const std::vector<double> g = random_values(3000, 8);
  const Tensor gt = tensor_of<TestType>(g, Shape{3000});
  const std::vector<double> d_exact = ops::gelu_backward(gt, x).to_vector<double>();
  const std::vector<double> d_approx = ops::gelu_backward(gt, x, true).to_vector<double>();
  std::vector<double> w_erf, w_exact, w_approx, w_d_exact, w_d_approx;
  const double c = std::sqrt(2.0 / M_PI);
  for (size_t i = 0; i < xr.size(); ++i) {
    const double z = xr[i], gz = static_cast<TestType>(g[i]);
    const double phi = 0.5 * (1 + std::erf(z / std::sqrt(2.0)));
    const double t = std::tanh(c * (z + 0.044715 * z * z * z));
    w_erf.push_back(std::erf(z));
    w_exact.push_back(z * phi);
    w_approx.push_back(0.5 * z * (1 + t));
    w_d_exact.push_back(gz * (phi + z * std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI)));
    w_d_approx.push_back(gz * (0.5 * (1 + t) +
                               0.5 * z * (1 - t * t) * c * (1 + 3 * 0.044715 * z * z)));
  }
  const double tol = std::is_same_v<TestType, float> ? 5e-6 : 1e-14;  // a few float32 ulp
  CHECK(max_rel_err(e, w_erf) < tol);
  CHECK(max_rel_err(exact, w_exact) < tol);
  CHECK(max_rel_err(approx, w_approx) < tol);
  CHECK(max_rel_err(d_exact, w_d_exact) < tol);
  CHECK(max_rel_err(d_approx, w_d_approx) < tol);
}

TEMPLATE_TEST_CASE("layer_norm and rms_norm match the formulas, forward and backward",
                   "[normalization]", float, double) {
  const int64_t rows = 6, cols = 37;
  const std::vector<double> xv = random_values(rows * cols, 9, -3, 3), wv = random_values(cols, 10),
                            bv = random_values(cols, 11), gv = random_values(rows * cols, 12);
  const Shape s{2, 3, cols};
  const Tensor x = tensor_of<TestType>(xv, s), w = tensor_of<TestType>(wv, Shape{cols}),
               b = tensor_of<TestType>(bv, Shape{cols}), g = tensor_of<TestType>(gv, s);
  for (bool rms : {false, true}) {
    INFO("rms " << rms);
    const double eps = 1e-5;
    const ops::NormForward f = rms ? ops::rms_norm(x, w, eps) : ops::layer_norm(x, w, b, eps);
    CHECK(f.rstd.shape() == Shape{2, 3});
    const ops::NormGrads grads = ops::norm_backward(g, x, w, f, rms, true, true, true);
    CHECK(grads.bias.defined() == !rms);
    // Naive, in double, from the rounded inputs.
    const std::vector<double> X = rounded<TestType>(xv), W = rounded<TestType>(wv),
                              B = rounded<TestType>(bv), G = rounded<TestType>(gv);
    std::vector<double> y(X.size()), gx(X.size()), gw(cols, 0.0), gb(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      double mu = 0, var = 0;
      for (int64_t j = 0; j < cols; ++j) mu += rms ? 0.0 : X[r * cols + j] / cols;
      for (int64_t j = 0; j < cols; ++j) var += std::pow(X[r * cols + j] - mu, 2) / cols;
      const double rstd = 1 / std::sqrt(var + eps);
      double mean_gh = 0, mean_ghx = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const double xh = (X[r * cols + j] - mu) * rstd, gh = G[r * cols + j] * W[j];
        y[r * cols + j] = xh * W[j] + (rms ? 0.0 : B[j]);
        mean_gh += rms ? 0.0 : gh / cols;
        mean_ghx += gh * xh / cols;
        gw[j] += G[r * cols + j] * xh;
        gb[j] += G[r * cols + j];
      }
      for (int64_t j = 0; j < cols; ++j) {
        const double xh = (X[r * cols + j] - mu) * rstd, gh = G[r * cols + j] * W[j];
        gx[r * cols + j] = rstd * (gh - mean_gh - xh * mean_ghx);
      }
    }
    const double tol = tolerance<TestType>() * 5;
    CHECK(max_rel_err(f.y.to_vector<double>(), y) < tol);
    CHECK(max_rel_err(grads.x.to_vector<double>(), gx) < tol);
    CHECK(max_rel_err(grads.weight.to_vector<double>(), gw) < tol);
    if (!rms) CHECK(max_rel_err(grads.bias.to_vector<double>(), gb) < tol);
    // The halves alone give the same values (the B/W split asks for them apart).
    const ops::NormGrads only_w = ops::norm_backward(g, x, w, f, rms, false, true, false);
    CHECK_FALSE(only_w.x.defined());
    CHECK(ops::equal(only_w.weight, grads.weight));
  }
  CHECK_THROWS_WITH(ops::layer_norm(x, Tensor::ones({5}, {x.dtype()}), Tensor(), 1e-5),
                    Catch::Contains("layer_norm: weight has shape [5], expected [37]"));
}

TEMPLATE_TEST_CASE("index_add_ sums repeated rows in index order", "[index_add]", float, double) {
  for (int threads : {1, 2}) {
    ThreadBudgetGuard budget(threads);
    const int64_t rows = 5, width = 70000;  // wide rows: the columns split across threads
    const std::vector<int64_t> index{3, 0, 3, 4, 3};
    const std::vector<double> sv = random_values(5 * width, 13), dv = random_values(rows * width, 14);
    Tensor dst = tensor_of<TestType>(dv, Shape{rows, width});
    ops::index_add_(dst, Tensor::from_vector(index), tensor_of<TestType>(sv, Shape{5, width}));
    const std::vector<double> got = dst.to_vector<double>();
    std::vector<TestType> want(dv.begin(), dv.end());
    for (size_t i = 0; i < index.size(); ++i) {
      for (int64_t c = 0; c < width; ++c) {
        want[index[i] * width + c] += static_cast<TestType>(sv[i * width + c]);
      }
    }
    // The same order of additions: the same values.
    CHECK(equal_values(got, std::vector<double>(want.begin(), want.end())));
  }
  Tensor dst = Tensor::zeros({3, 2});
  CHECK_THROWS_WITH(ops::index_add_(dst, Tensor::from_vector<int64_t>({1, 3}), Tensor::ones({2, 2})),
                    "index_add_: index 3 at position 1 is outside [0, 3) for dst of shape [3, 2]");
  CHECK(ops::equal(dst, Tensor::zeros({3, 2})));
  CHECK_THROWS_AS(ops::index_add_(dst, Tensor::from_vector<int64_t>({1}), Tensor::ones({1, 3})),
                  std::invalid_argument);
}
