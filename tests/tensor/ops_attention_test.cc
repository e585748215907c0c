// flash_attention and its backward (tensor/attention.h) against naive attention in double:
// the scores, softmax and products written out loop by loop from the rounded inputs, and the
// softmax's gradient from its closed form. Shapes cross the kernels' 64-row and 64-key tiles
// (63, 64, 65, 130), keys != queries both ways, causal and not; the result must not depend on
// the thread count, bit for bit. (Finite differences of the differentiable op:
// tests/autograd/gradcheck_test.cc; against the unfused layer and torch: tests/nn.)
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "tensor/attention.h"
#include "tensor/threads.h"
#include "tests/compare.h"
#include "tests/tensor/test_util.h"

using namespace pipewright;
using namespace pipewright::testing;

namespace {

struct Case {
  int64_t n, l, s, d;
  bool causal;
};

/// Attention of one call in double: out [n, l, d], lse [n, l] and the three gradients for an
/// output gradient g, from q, k, v, g as given (already rounded to the tested dtype).
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

Reference naive_attention(const Case& c, double scale, const std::vector<double>& q,
                          const std::vector<double>& k, const std::vector<double>& v,
                          const std::vector<double>& g) {
  Reference r;
  r.out.assign(c.n * c.l * c.d, 0.0);
  r.lse.assign(c.n * c.l, -INFINITY);
  r.dq.assign(c.n * c.l * c.d, 0.0);
  r.dk.assign(c.n * c.s * c.d, 0.0);
  r.dv.assign(c.n * c.s * c.d, 0.0);
  for (int64_t n = 0; n < c.n; ++n) {
    for (int64_t i = 0; i < c.l; ++i) {
      const int64_t keys = c.causal ? std::min(i + 1, c.s) : c.s;
      if (keys == 0) continue;
      auto qd = [&](int64_t d) { return q[(n * c.l + i) * c.d + d]; };
      auto kd = [&](int64_t j, int64_t d) { return k[(n * c.s + j) * c.d + d]; };
      auto vd = [&](int64_t j, int64_t d) { return v[(n * c.s + j) * c.d + d]; };
      auto gd = [&](int64_t d) { return g[(n * c.l + i) * c.d + d]; };
      std::vector<double> p(keys);
      double m = -INFINITY;
      for (int64_t j = 0; j < keys; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < c.d; ++d) dot += qd(d) * kd(j, d);
        p[j] = scale * dot;
        m = std::max(m, p[j]);
      }
      double sum = 0.0;
      for (double& x : p) sum += (x = std::exp(x - m));
      for (double& x : p) x /= sum;
      r.lse[n * c.l + i] = m + std::log(sum);
      for (int64_t j = 0; j < keys; ++j) {
        for (int64_t d = 0; d < c.d; ++d) r.out[(n * c.l + i) * c.d + d] += p[j] * vd(j, d);
      }
      // softmax's gradient: ds_j = p_j (dp_j - Σ_j' p_j' dp_j'), dp_j = g · v_j.
      std::vector<double> dp(keys);
      double delta = 0.0;
      for (int64_t j = 0; j < keys; ++j) {
        for (int64_t d = 0; d < c.d; ++d) dp[j] += gd(d) * vd(j, d);
        delta += p[j] * dp[j];
      }
      for (int64_t j = 0; j < keys; ++j) {
        const double ds = p[j] * (dp[j] - delta);
        for (int64_t d = 0; d < c.d; ++d) {
          r.dq[(n * c.l + i) * c.d + d] += scale * ds * kd(j, d);
          r.dk[(n * c.s + j) * c.d + d] += scale * ds * qd(d);
          r.dv[(n * c.s + j) * c.d + d] += p[j] * gd(d);
        }
      }
    }
  }
  return r;
}

/// Gradients are sums of up to S (or L) products of softmax terms: a float32 bound with room.
template <class T>
constexpr double gradient_tolerance() {
  return std::is_same_v<T, float> ? 1e-4 : 1e-11;
}

}  // namespace

TEMPLATE_TEST_CASE("flash_attention and its backward equal naive attention in double",
                   "[attention]", float, double) {
  const std::vector<Case> cases{
      {1, 1, 1, 1, true},    {2, 5, 5, 3, true},     {2, 5, 5, 3, false},  {3, 63, 63, 8, true},
      {1, 64, 64, 8, true},  {1, 65, 65, 4, true},   {2, 130, 130, 16, true},
      {2, 130, 130, 16, false}, {1, 70, 40, 5, true}, {1, 40, 70, 5, true}, {1, 70, 40, 5, false},
      {1, 130, 130, 16, true},  {1, 130, 200, 16, false},
  };
  for (const Case& c : cases) {
    INFO("N " << c.n << " L " << c.l << " S " << c.s << " D " << c.d << " causal " << c.causal);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.d)) * 1.3;
    const std::vector<double> qv = random_values(c.n * c.l * c.d, 1, -2, 2),
                              kv = random_values(c.n * c.s * c.d, 2, -2, 2),
                              vv = random_values(c.n * c.s * c.d, 3),
                              gv = random_values(c.n * c.l * c.d, 4);
    const Tensor q = tensor_of<TestType>(qv, {c.n, c.l, c.d}),
                 k = tensor_of<TestType>(kv, {c.n, c.s, c.d}),
                 v = tensor_of<TestType>(vv, {c.n, c.s, c.d}),
                 g = tensor_of<TestType>(gv, {c.n, c.l, c.d});
    const Reference want = naive_attention(c, scale, rounded<TestType>(qv), rounded<TestType>(kv),
                                           rounded<TestType>(vv), rounded<TestType>(gv));
    std::vector<std::vector<Tensor>> by_threads;
    for (int threads : {1, 2}) {
      ThreadBudgetGuard budget(threads);
      const ops::AttentionResult got = ops::flash_attention(q, k, v, scale, c.causal);
      CHECK(got.out.dtype() == q.dtype());
      CHECK(got.lse.shape() == Shape{c.n, c.l});
      CHECK(max_rel_err(got.out.to_vector<double>(), want.out) < tolerance<TestType>());
      CHECK(max_rel_err(got.lse.to_vector<double>(), want.lse) < tolerance<TestType>());
      std::vector<Tensor> grads =
          ops::flash_attention_backward(q, k, v, got.out, g, got.lse, scale, c.causal);
      CHECK(max_rel_err(grads[0].to_vector<double>(), want.dq) < gradient_tolerance<TestType>());
      CHECK(max_rel_err(grads[1].to_vector<double>(), want.dk) < gradient_tolerance<TestType>());
      CHECK(max_rel_err(grads[2].to_vector<double>(), want.dv) < gradient_tolerance<TestType>());
      grads.push_back(got.out);
      grads.push_back(got.lse);
      by_threads.push_back(grads);
    }
    // Every sum runs in one thread in a fixed order (Note [Tiled attention],
    // tensor/cpu/attention.cc). With one head (N = 1) and two threads the backward takes two
    // passes, with one thread one pass: the same products in the same order.
    CHECK(bitwise_equal(by_threads[0], by_threads[1]));
  }
}

TEST_CASE("flash_attention keeps leading dims and stores no scores", "[attention]") {
  const Shape qs{2, 3, 70, 8};
  const Tensor q = random_tensor<float>(qs, 5), k = random_tensor<float>(qs, 6),
               v = random_tensor<float>(qs, 7);
  Allocator& cpu = allocator_for(Device::cpu());
  const int64_t before = cpu.allocated();
  cpu.reset_peak();
  ops::AttentionResult r = ops::flash_attention(q, k, v, 0.5, true);
  CHECK(r.out.shape() == qs);
  CHECK(r.lse.shape() == Shape{2, 3, 70});
  // Exactly the output and the log-sum-exp: the [6, 70, 70] scores are never allocated.
  const int64_t result_bytes = (qs.numel() + 2 * 3 * 70) * 4;
  CHECK(cpu.peak() - before == result_bytes);
  const Tensor g = random_tensor<float>(qs, 8);
  cpu.reset_peak();
  const int64_t held = cpu.allocated();
  const std::vector<Tensor> grads = ops::flash_attention_backward(q, k, v, r.out, g, r.lse, 0.5,
                                                                  true);
  CHECK(cpu.peak() - held == 3 * qs.numel() * 4);  // the three gradients, nothing else
  // The same numbers as the [N, L, D] call.
  const Shape flat{6, 70, 8};
  ops::AttentionResult f = ops::flash_attention(q.reshape(flat), k.reshape(flat),
                                                v.reshape(flat), 0.5, true);
  CHECK(bitwise_equal(r.out.reshape(flat), f.out));
}

TEST_CASE("flash_attention of 16-bit inputs computes in float32", "[attention]") {
  const Case c{2, 67, 67, 8, true};
  const double scale = 0.35;
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    INFO(dtype_name(dtype));
    const Tensor q = random_tensor<float>({c.n, c.l, c.d}, 11, -2, 2).to(dtype),
                 k = random_tensor<float>({c.n, c.s, c.d}, 12, -2, 2).to(dtype),
                 v = random_tensor<float>({c.n, c.s, c.d}, 13).to(dtype),
                 g = random_tensor<float>({c.n, c.l, c.d}, 14).to(dtype);
    const ops::AttentionResult r = ops::flash_attention(q, k, v, scale, true);
    CHECK(r.out.dtype() == DType::kFloat32);
    CHECK(r.lse.dtype() == DType::kFloat32);
    const std::vector<Tensor> grads =
        ops::flash_attention_backward(q, k, v, r.out, g, r.lse, scale, true);
    for (const Tensor& t : grads) CHECK(t.dtype() == DType::kFloat32);
    // The 16-bit values, widened exactly, give the float32 kernel's products.
    const Reference want = naive_attention(c, scale, q.to_vector<double>(), k.to_vector<double>(),
                                           v.to_vector<double>(), g.to_vector<double>());
    CHECK(max_rel_err(r.out.to_vector<double>(), want.out) < tolerance<float>());
    CHECK(max_rel_err(r.lse.to_vector<double>(), want.lse) < tolerance<float>());
    CHECK(max_rel_err(grads[0].to_vector<double>(), want.dq) < gradient_tolerance<float>());
    CHECK(max_rel_err(grads[1].to_vector<double>(), want.dk) < gradient_tolerance<float>());
    CHECK(max_rel_err(grads[2].to_vector<double>(), want.dv) < gradient_tolerance<float>());
    // A float32 gradient is refused: the caller rounds it (the precision policy does).
    CHECK_THROWS_AS(ops::flash_attention_backward(q, k, v, r.out, g.to(DType::kFloat32), r.lse,
                                                  scale, true),
                    std::invalid_argument);
  }
}

TEST_CASE("flash_attention with no keys, no queries or no head dim", "[attention]") {
  const Tensor q = random_tensor<float>({2, 3, 4}, 1);
  const Tensor none = Tensor::zeros({2, 0, 4});
  const ops::AttentionResult r = ops::flash_attention(q, none, none, 1.0, true);
  CHECK(bitwise_equal(r.out, Tensor::zeros({2, 3, 4})));
  for (double x : r.lse.to_vector<double>()) CHECK(x == -INFINITY);
  const std::vector<Tensor> grads =
      ops::flash_attention_backward(q, none, none, r.out, q, r.lse, 1.0, true);
  CHECK(bitwise_equal(grads[0], Tensor::zeros({2, 3, 4})));
  CHECK(grads[1].shape() == Shape{2, 0, 4});

  const Tensor k = random_tensor<float>({2, 5, 4}, 2);
  const ops::AttentionResult empty = ops::flash_attention(none, k, k, 1.0, false);
  CHECK(empty.out.shape() == Shape{2, 0, 4});
  const std::vector<Tensor> kv_grads =
      ops::flash_attention_backward(none, k, k, empty.out, none, empty.lse, 1.0, false);
  CHECK(bitwise_equal(kv_grads[1], Tensor::zeros({2, 5, 4})));
}

TEST_CASE("flash_attention refuses mismatched operands, naming them", "[attention]") {
  const Tensor q = Tensor::zeros({2, 3, 4}), k = Tensor::zeros({2, 5, 4});
  CHECK_THROWS_WITH(ops::flash_attention(q, k, Tensor::zeros({2, 5, 3}), 1.0, true),
                    "flash_attention: expected q [..., L, D] and k, v [..., S, D] of one rank "
                    ">= 3, got q [2, 3, 4] float32 on cpu:0, k [2, 5, 4] float32 on cpu:0, v "
                    "[2, 5, 3] float32 on cpu:0");
  CHECK_THROWS_AS(ops::flash_attention(Tensor::zeros({3, 4}), k, k, 1.0, true),
                  std::invalid_argument);
  CHECK_THROWS_AS(ops::flash_attention(q, Tensor::zeros({2, 5, 5}), Tensor::zeros({2, 5, 5}),
                                       1.0, true),
                  std::invalid_argument);
  CHECK_THROWS_AS(ops::flash_attention(q, Tensor::zeros({1, 5, 4}), Tensor::zeros({1, 5, 4}),
                                       1.0, true),
                  std::invalid_argument);
  CHECK_THROWS_AS(ops::flash_attention(q, k.to(DType::kFloat64), k, 1.0, true),
                  std::invalid_argument);
  const Tensor qi = Tensor::zeros({2, 3, 4}, {.dtype = DType::kInt64});
  CHECK_THROWS_AS(ops::flash_attention(qi, qi, qi, 1.0, true), std::invalid_argument);
  const ops::AttentionResult r = ops::flash_attention(q, k, k, 1.0, true);
  CHECK_THROWS_AS(ops::flash_attention_backward(q, k, k, r.out, k, r.lse, 1.0, true),
                  std::invalid_argument);
  CHECK_THROWS_AS(ops::flash_attention_backward(q, k, k, r.out, q, Tensor(), 1.0, true),
                  std::invalid_argument);
}
