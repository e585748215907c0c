// BatchNorm1d against naive double loops: training and eval outputs, running statistics
// (unbiased variance, momentum None), (N, C, L) input, deferred mode, recompute.
#include <catch2/catch.hpp>

#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/batch_norm.h"
#include "autograd/grad_mode.h"
#include "nn/batch_norm.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace pw = pipewright;
namespace nn = pipewright::nn;
using pw::Tensor;

namespace {

Tensor random(const pw::Shape& shape, uint64_t seed, double lo = -2.0, double hi = 3.0) {
  pw::Generator generator(seed);
  Tensor t = Tensor::empty(shape);
  generator.uniform_(t, lo, hi);
  return t;
}

/// Per-channel statistics of x [N, C] or [N, C, L], computed naively in double.
struct Naive {
  std::vector<double> mean, biased_var, unbiased_var;
};

Naive naive_stats(const Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1), l = x.dim() == 3 ? x.size(2) : 1;
  const std::vector<float> v = x.to_vector<float>();
  Naive s;
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < l; ++j) sum += v[static_cast<size_t>((i * c + ch) * l + j)];
    const double mean = sum / static_cast<double>(n * l);
    double sq = 0.0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < l; ++j) {
        const double d = v[static_cast<size_t>((i * c + ch) * l + j)] - mean;
        sq += d * d;
      }
    s.mean.push_back(mean);
    s.biased_var.push_back(sq / static_cast<double>(n * l));
    s.unbiased_var.push_back(sq / static_cast<double>(n * l - 1));
  }
  return s;
}

/// (x - mean_c) / sqrt(var_c + eps) * w_c + b_c, naively.
std::vector<double> naive_normalise(const Tensor& x, const std::vector<double>& mean,
                                    const std::vector<double>& var, double eps,
                                    const std::vector<float>& w, const std::vector<float>& b) {
  const int64_t c = x.size(1), l = x.dim() == 3 ? x.size(2) : 1;
  const std::vector<float> v = x.to_vector<float>();
  std::vector<double> y(v.size());
  for (size_t k = 0; k < v.size(); ++k) {
    const auto ch = static_cast<size_t>((static_cast<int64_t>(k) / l) % c);
    y[k] = (v[k] - mean[ch]) / std::sqrt(var[ch] + eps) * w[ch] + b[ch];
  }
  return y;
}

void check_close(const Tensor& actual, const std::vector<double>& expected, double tol = 1e-5) {
  const std::vector<float> a = actual.to_vector<float>();
  REQUIRE(a.size() == expected.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(expected[i]).margin(tol).epsilon(tol));
}

std::string sci(double v) {
  std::ostringstream os;
  os << std::scientific << std::setprecision(6) << v;
  return os.str();
}

void set(const Tensor& t, const std::vector<float>& values) {
  Tensor dst = t;
  dst.copy_from(Tensor::from_vector(values, t.shape()));
}

}  // namespace

TEST_CASE("BatchNorm1d training: batch statistics, running stats with the unbiased variance") {
  nn::BatchNorm1d bn(3);
  set(bn.weight(), {1.5f, -0.5f, 2.0f});
  set(bn.bias(), {0.1f, 0.2f, -0.3f});
  const Tensor x = random({6, 3}, 1);
  const Naive s = naive_stats(x);
  Tensor y = bn(x);
  check_close(y, naive_normalise(x, s.mean, s.biased_var, 1e-5, {1.5f, -0.5f, 2.0f}, {0.1f, 0.2f, -0.3f}));
  std::vector<double> rm, rv;
  for (size_t c = 0; c < 3; ++c) {
    rm.push_back(0.1 * s.mean[c]);                   // 0.9·0 + 0.1·mean
    rv.push_back(0.9 + 0.1 * s.unbiased_var[c]);     // 0.9·1 + 0.1·var (unbiased)
  }
  check_close(bn.running_mean(), rm);
  check_close(bn.running_var(), rv);
  CHECK(bn.num_batches_tracked().item() == 1);
}

TEST_CASE("BatchNorm1d eval uses the running statistics and updates nothing") {
  nn::BatchNorm1d bn(2, 1e-3);
  set(bn.running_mean(), {0.5f, -1.0f});
  set(bn.running_var(), {2.0f, 0.25f});
  bn.eval();
  const Tensor x = random({4, 2}, 2);
  check_close(bn(x), naive_normalise(x, {0.5, -1.0}, {2.0, 0.25}, 1e-3, {1, 1}, {0, 0}));
  check_close(bn.running_mean(), {0.5, -1.0});
  CHECK(bn.num_batches_tracked().item() == 0);
}

TEST_CASE("BatchNorm1d momentum None is a cumulative moving average") {
  nn::BatchNorm1d bn(2, 1e-5, std::nullopt);
  const Tensor x1 = random({5, 2}, 3), x2 = random({5, 2}, 4);
  bn(x1);
  bn(x2);
  const Naive s1 = naive_stats(x1), s2 = naive_stats(x2);
  check_close(bn.running_mean(), {(s1.mean[0] + s2.mean[0]) / 2, (s1.mean[1] + s2.mean[1]) / 2});
  check_close(bn.running_var(), {(s1.unbiased_var[0] + s2.unbiased_var[0]) / 2,
                                 (s1.unbiased_var[1] + s2.unbiased_var[1]) / 2});
  CHECK(bn.num_batches_tracked().item() == 2);
  CHECK(bn.str() == "BatchNorm1d(2, eps=1e-05, momentum=None, affine=true, track_running_stats=true)");
}

TEST_CASE("BatchNorm1d on (N, C, L) input: statistics over N and L") {
  nn::BatchNorm1d bn(3, 1e-5, 0.5);
  const Tensor x = random({4, 3, 5}, 5);
  const Naive s = naive_stats(x);
  check_close(bn(x), naive_normalise(x, s.mean, s.biased_var, 1e-5, {1, 1, 1}, {0, 0, 0}));
  check_close(bn.running_mean(), {0.5 * s.mean[0], 0.5 * s.mean[1], 0.5 * s.mean[2]});
  check_close(bn.running_var(), {0.5 + 0.5 * s.unbiased_var[0], 0.5 + 0.5 * s.unbiased_var[1],
                                 0.5 + 0.5 * s.unbiased_var[2]});
}

TEST_CASE("accumulate_batch_stats merges batches exactly; commit_running_stats; bad tensors") {
  // Two batches merged equal the statistics of both together (Chan's update, no cancellation
  // even with |mean| >> std).
  const Tensor a = pw::ops::add(random({6, 3}, 7, -1.0, 1.0), 1000.0);
  const Tensor b = pw::ops::add(random({4, 3}, 8, -1.0, 1.0), 1000.5);
  const Naive whole = naive_stats(pw::cat({a, b}));
  Tensor mean = Tensor::zeros({3}, {pw::DType::kFloat64});
  Tensor m2 = Tensor::zeros({3}, {pw::DType::kFloat64});
  int64_t seen = 0;
  for (const Tensor& x : {a, b}) {
    pw::autograd::BatchNormStats stats;
    pw::autograd::batch_norm_train(x, Tensor(), Tensor(), 1e-5, &stats);
    pw::autograd::accumulate_batch_stats(stats, x.size(0), seen, mean, m2);
    seen += x.size(0);
  }
  for (int ch = 0; ch < 3; ++ch) {
    CHECK(mean.data<double>()[ch] == Approx(whole.mean[ch]).epsilon(1e-7));
    CHECK(m2.data<double>()[ch] / 10 == Approx(whole.biased_var[ch]).epsilon(1e-4));
  }
  // The commit: momentum 0.5 from running stats 0 and 1, then momentum None (cumulative).
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
  Tensor tracked = Tensor::zeros({1}, {pw::DType::kInt64});
  pw::autograd::commit_running_stats(mean, m2, 10, 0.5, rm, rv, tracked);
  for (int ch = 0; ch < 3; ++ch) {
    CHECK(rm.data<float>()[ch] == Approx(0.5 * whole.mean[ch]).epsilon(1e-6));
    CHECK(rv.data<float>()[ch] == Approx(0.5 + 0.5 * whole.unbiased_var[ch]).epsilon(1e-4));
  }
  CHECK(tracked.data<int64_t>()[0] == 1);
  pw::autograd::commit_running_stats(mean, m2, 10, std::nullopt, rm, rv, tracked);  // f = 1/2
  for (int ch = 0; ch < 3; ++ch) {
    CHECK(rm.data<float>()[ch] == Approx(0.75 * whole.mean[ch]).epsilon(1e-6));
  }
  CHECK(tracked.data<int64_t>()[0] == 2);

  pw::autograd::BatchNormStats stats;
  pw::autograd::batch_norm_train(a, Tensor(), Tensor(), 1e-5, &stats);
  Tensor f32 = Tensor::zeros({3});
  CHECK_THROWS_WITH(pw::autograd::accumulate_batch_stats(stats, 6, 0, f32, m2),
                    Catch::Contains("acc_mean must be a contiguous float64 [3] on cpu") &&
                        Catch::Contains("got float32 [3]"));
  Tensor short_m2 = Tensor::zeros({2}, {pw::DType::kFloat64});
  CHECK_THROWS_WITH(pw::autograd::accumulate_batch_stats(stats, 6, 0, mean, short_m2),
                    Catch::Contains("got float64 [2]"));
  CHECK_THROWS_WITH(pw::autograd::accumulate_batch_stats({}, 6, 0, mean, m2),
                    Catch::Contains("mean and the float64 var"));
  Tensor f64_tracked = Tensor::zeros({1}, {pw::DType::kFloat64});
  CHECK_THROWS_WITH(pw::autograd::commit_running_stats(mean, m2, 10, 0.1, rm, rv, f64_tracked),
                    Catch::Contains("num_batches_tracked must be one int64 on cpu") &&
                        Catch::Contains("got float64 [1]"));
  CHECK_THROWS_WITH(pw::autograd::commit_running_stats(mean, m2, 0, 0.1, rm, rv, tracked),
                    Catch::Contains("count must be >= 1, got 0"));
}

TEST_CASE("deferred BatchNorm over 4 micro-batches equals plain BatchNorm over the whole batch") {
  const Tensor batch = random({14, 3, 2}, 6, 1.0, 4.0);  // chunks of 4, 4, 4, 2
  nn::BatchNorm1d plain(3), deferred(3);
  plain(batch);

  deferred.set_deferred(true);
  for (const Tensor& micro : batch.chunk(4)) {
    const Naive s = naive_stats(micro);
    // Each micro-batch is normalised with its own statistics...
    check_close(deferred(micro), naive_normalise(micro, s.mean, s.biased_var, 1e-5, {1, 1, 1}, {0, 0, 0}));
  }
  // ...while the running statistics wait for the commit.
  check_close(deferred.running_mean(), {0, 0, 0});
  CHECK(deferred.num_batches_tracked().item() == 0);
  CHECK(deferred.deferred_count() == 28);
  deferred.commit_deferred();

  CHECK(pw::ops::allclose(deferred.running_mean(), plain.running_mean(), 1e-5, 1e-6));
  CHECK(pw::ops::allclose(deferred.running_var(), plain.running_var(), 1e-5, 1e-6));
  CHECK(deferred.num_batches_tracked().item() == 1);
  CHECK(deferred.deferred_count() == 0);

  // Committing nothing changes nothing.
  const Tensor mean_before = deferred.running_mean().clone();
  deferred.commit_deferred();
  CHECK(pw::ops::equal(mean_before, deferred.running_mean()));
  CHECK(deferred.num_batches_tracked().item() == 1);
}

TEST_CASE("BatchNorm1d does not update running statistics while recomputing") {
  nn::BatchNorm1d bn(2);
  const Tensor x = random({4, 2}, 7);
  {
    pw::autograd::CheckpointModeGuard recomputing(false, true);
    bn(x);
    bn.set_deferred(true);
    bn(x);
  }
  check_close(bn.running_mean(), {0, 0});
  check_close(bn.running_var(), {1, 1});
  CHECK(bn.num_batches_tracked().item() == 0);
  CHECK(bn.deferred_count() == 0);
}

TEST_CASE("BatchNorm1d errors name the shapes") {
  nn::BatchNorm1d bn(1024);
  CHECK_THROWS_WITH(bn(Tensor::ones({32, 100})),
                    "BatchNorm1d(num_features=1024): input has shape [32, 100], expected "
                    "[N, 1024] or [N, 1024, L]");
  nn::BatchNorm1d small(2);
  CHECK_THROWS_AS(small(Tensor::ones({1, 2})), std::invalid_argument);  // one value per channel
  CHECK_THROWS_AS(nn::BatchNorm1d(0), std::invalid_argument);
  CHECK_THROWS_AS(nn::BatchNorm1d(2, 1e-5, 1.5), std::invalid_argument);
}

TEST_CASE("BatchNorm1d without affine or running statistics") {
  nn::BatchNorm1d bn(2, 1e-5, 0.1, false, false);
  CHECK(bn.parameters().empty());
  CHECK(bn.named_buffers().empty());
  bn.eval();  // no running stats: eval still uses batch statistics (PyTorch)
  const Tensor x = random({5, 2}, 8);
  const Naive s = naive_stats(x);
  check_close(bn(x), naive_normalise(x, s.mean, s.biased_var, 1e-5, {1, 1}, {0, 0}));
}

// The running variance must not be rebuilt as 1/invstd² - eps from the float32 invstd. When
// var ≪ eps that difference cancels: with var ≈ 1e-12 and eps = 1e-3, invstd² ≈ 1e3 carries a
// float32 rounding of ~6e-8 relative, i.e. ~6e-11 absolute in 1/invstd², about 60 times the
// variance itself, so such a value is garbage (often negative). The module must use the kernel's own double batch variance.
TEST_CASE("BatchNorm1d running variance is exact when the batch variance is far below eps") {
  // 1 + 1e-6·u: 16 float32 ulps of spread around 1, variance ~1e-13..1e-12 (computed in
  // double from the same float32 values, so the reference is exact).
  const Tensor x = pw::ops::add(random({64, 4}, 11, -1e-6, 1e-6), 1.0);
  const Naive s = naive_stats(x);
  for (size_t c = 0; c < 4; ++c) REQUIRE(s.unbiased_var[c] < 1e-11);

  // momentum 1: the running variance is the unbiased batch variance itself, not swamped by
  // the 0.9 · 1 of the default momentum in float32.
  auto check_var = [&](const Tensor& running_var) {
    const std::vector<float> rv = running_var.to_vector<float>();
    for (size_t c = 0; c < 4; ++c) {
      INFO("channel " << c << ": running_var " << sci(rv[c]) << ", reference " << sci(s.unbiased_var[c]));
      CHECK(std::abs(rv[c] - s.unbiased_var[c]) <= 1e-6 * s.unbiased_var[c]);
    }
  };
  SECTION("plain update") {
    nn::BatchNorm1d bn(4, 1e-3, 1.0);
    bn(x);
    check_var(bn.running_var());
  }
  SECTION("deferred update (Σx² accumulated from the batch variance)") {
    nn::BatchNorm1d bn(4, 1e-3, 1.0);
    bn.set_deferred(true);
    bn(x);
    bn.commit_deferred();
    // Σx²/M - mean² cancels too (mean² ≈ 1 against var ≈ 1e-13 in double: ~1e-16 absolute,
    // 1e-3 relative), so the deferred path is checked with a looser bound.
    const std::vector<float> rv = bn.running_var().to_vector<float>();
    for (size_t c = 0; c < 4; ++c) {
      INFO("channel " << c << ": running_var " << sci(rv[c]) << ", reference " << sci(s.unbiased_var[c]));
      CHECK(std::abs(rv[c] - s.unbiased_var[c]) <= 1e-2 * s.unbiased_var[c]);
    }
  }
  SECTION("momentum None (cumulative average: the first batch is taken whole)") {
    nn::BatchNorm1d bn(4, 1e-3, std::nullopt);
    bn(x);
    check_var(bn.running_var());
  }
}
