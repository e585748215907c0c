// autograd::scaled_dot_product_attention (the tiled kernels, tensor/attention.h) against the
// unfused attention it replaces: batched_matmul, softmax (masked or the fused causal one),
// batched_matmul, recorded op by op; under the bf16 policy against the same kernels fed the
// rounded operands; and the memory a CausalSelfAttention keeps for its backward, from the
// allocator's exact counters: linear in the sequence length with the flash kernel, quadratic
// without. (Finite differences: gradcheck_test.cc; against torch: tests/nn.)
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "nn/attention.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"
#include "tensor/masking.h"
#include "tensor/ops.h"
#include "tests/compare.h"

using namespace pipewright;
using pipewright::testing::all_close;
using pipewright::testing::bitwise_equal;
namespace ag = pipewright::autograd;

namespace {

Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::kFloat32) {
  Generator g(seed);
  GeneratorGuard guard(g);
  Tensor t = Tensor::randn(shape).to(dtype);
  t.set_requires_grad(true);
  return t;
}

/// softmax(scale · q kᵀ, causal) · v by the unfused differentiable ops.
Tensor unfused_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                         double scale) {
  const Tensor scores = ag::batched_matmul(q, k, false, true);
  if (!causal) return ag::batched_matmul(ag::softmax(ag::mul(scores, scale)), v);
  const Tensor mask = ops::causal_mask(q.size(-2), k.size(-2), {scores.dtype()});
  return ag::batched_matmul(
      ag::softmax(ag::masked_fill(ag::mul(scores, scale), mask,
                                  -std::numeric_limits<double>::infinity())),
      v);
}

/// {output, grad q, grad k, grad v} of f(q, k, v) for the output gradient g.
template <class F>
std::vector<Tensor> run(F f, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g) {
  const Tensor y = f(q, k, v);
  std::vector<Tensor> out{y.detach()};
  for (const Tensor& grad : ag::backward({y}, {g}, {q, k, v})) out.push_back(grad);
  return out;
}

}  // namespace

TEST_CASE("scaled_dot_product_attention equals the unfused attention, forward and gradients") {
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    for (bool causal : {true, false}) {
      INFO(dtype_name(dtype) << " causal " << causal);
      // 130 queries over 100 or 130 keys: several 64-row tiles, the diagonal inside them.
      const int64_t keys = causal ? 130 : 100;
      const Tensor q = randn({2, 3, 130, 8}, 1, dtype), k = randn({2, 3, keys, 8}, 2, dtype),
                   v = randn({2, 3, keys, 8}, 3, dtype);
      const Tensor g = randn({2, 3, 130, 8}, 4, dtype).detach();
      const double scale = 0.4;
      const std::vector<Tensor> flash = run(
          [&](const Tensor& a, const Tensor& b, const Tensor& c) {
            return ag::scaled_dot_product_attention(a, b, c, causal, scale);
          },
          q, k, v, g);
      const std::vector<Tensor> unfused = run(
          [&](const Tensor& a, const Tensor& b, const Tensor& c) {
            return unfused_attention(a, b, c, causal, scale);
          },
          q, k, v, g);
      const double tol = dtype == DType::kFloat64 ? 1e-12 : 2e-5;
      CHECK(all_close(flash, unfused, {.abs = tol, .rel = tol}));
    }
  }
  // The default scale is 1/√D, torch's.
  const Tensor q = randn({1, 5, 16}, 5), k = randn({1, 5, 16}, 6), v = randn({1, 5, 16}, 7);
  CHECK(bitwise_equal(ag::scaled_dot_product_attention(q, k, v),
                      ag::scaled_dot_product_attention(q, k, v, true, 0.25)));
}

TEST_CASE("under bf16, scaled_dot_product_attention computes on rounded operands and gradient") {
  const Tensor q = randn({2, 2, 70, 8}, 11), k = randn({2, 2, 70, 8}, 12),
               v = randn({2, 2, 70, 8}, 13);
  const Tensor g = randn({2, 2, 70, 8}, 14).detach();
  auto flash = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    return ag::scaled_dot_product_attention(a, b, c);
  };
  std::vector<Tensor> policy;
  {
    ag::PrecisionScope scope(ag::Precision::kBFloat16);
    policy = run(flash, q, k, v, g);
  }
  for (const Tensor& t : policy) CHECK(t.dtype() == DType::kFloat32);
  // The same kernels in float32, given q, k, v and the output gradient rounded to bf16 by hand
  // (the CPU widens 16-bit operands exactly): the same bits.
  auto rounded = [](const Tensor& t) {
    Tensor r = t.detach().to(DType::kBFloat16).to(DType::kFloat32);
    r.set_requires_grad(t.requires_grad());
    return r;
  };
  const std::vector<Tensor> by_hand =
      run(flash, rounded(q), rounded(k), rounded(v), rounded(g));
  CHECK(bitwise_equal(policy, by_hand));
  // And bf16-close to float32 (8 significant bits, two products deep).
  const std::vector<Tensor> fp32 = run(flash, q, k, v, g);
  CHECK(all_close(policy, fp32, {.abs = 0.05, .rel = 0.05}));
  CHECK_FALSE(bitwise_equal(policy[0], fp32[0]));
}

TEST_CASE("CausalSelfAttention keeps O(T) for its backward with the flash kernel, O(T²) without") {
  // Bytes the layer holds after its forward (saved for the backward, and its output), at T and
  // 2T: with the flash kernel every saved tensor is [B, T, ·], so doubling T doubles them
  // exactly; the fused kernel also keeps the [B, H, T, T] weights.
  Allocator& cpu = allocator_for(Device::cpu());
  auto held_after_forward = [&](nn::AttentionKernel kernel, int64_t t) {
    Generator generator(21);
    GeneratorGuard guard(generator);
    nn::CausalSelfAttention layer(32, 4, {.kernel = kernel});
    const Tensor x = randn({2, t, 32}, 22);
    const int64_t before = cpu.allocated();
    Tensor y = layer.forward(x);
    const int64_t held = cpu.allocated() - before;
    ag::backward({y}, {Tensor::ones(y.shape())}, {x});  // and the graph runs
    return held;
  };
  const int64_t flash_t = held_after_forward(nn::AttentionKernel::kFlash, 96),
                flash_2t = held_after_forward(nn::AttentionKernel::kFlash, 192),
                fused_t = held_after_forward(nn::AttentionKernel::kFused, 96),
                fused_2t = held_after_forward(nn::AttentionKernel::kFused, 192);
  CHECK(flash_2t == 2 * flash_t);
  // The fused path keeps the attention weights, B·H·T² floats (saved once, by the softmax and
  // the second product); the flash path keeps its output [B, H, T, D] and log-sum-exp
  // [B, H, T] instead. Everything else (the projections' inputs, q, k, v) is common.
  auto surplus = [](int64_t t) {
    const int64_t b = 2, h = 4, d = 8, f = sizeof(float);
    return b * h * t * t * f - b * h * t * d * f - b * h * t * f;
  };
  CHECK(fused_t - flash_t == surplus(96));
  CHECK(fused_2t - flash_2t == surplus(192));
}
