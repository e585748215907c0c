// One TransformerBlock's forward + backward on the CPU, and its attention alone, at
// B = 16, T = 128, C = 256, 4 heads, float32: pipewright's side of the comparison with
// PyTorch eager (bench/peers/torch_transformer_block.py; both run interleaved by
// bench/peers/transformer_compare.py, results in docs/BENCHMARKS.md, "Transformer block").
//
//   block/kernel:0        nn::TransformerBlock, attention weights by causal_softmax (kFused,
//                         the default)
//   block/kernel:1        the same with AttentionKernel::kReference (mul, masked_fill, softmax)
//   block/kernel:2        the same with AttentionKernel::kFlash (tiled; no [B, H, T, T] tensor)
//   attention/kernel:K    nn::CausalSelfAttention alone, the same three kernels
//   long/kernel:K/T:T     nn::CausalSelfAttention at B = 2 and T = 256, 1024 (tokens per step
//                         4 and 16 times fewer than T: the scores' T² shows), fused and flash
//   parts/...             the block's pieces alone (forward + backward of each), to see where
//                         the time goes: layer_norm, gelu, the MLP, causal_softmax, the two
//                         batched products of attention, and sdpa: the tiled attention's core
//                         (autograd::scaled_dot_product_attention of q, k, v [B, 4, T, 64])
//                         at B 16, T 128 and B 2, T 1024
//
// Each iteration: zero the gradients, forward, backward from a fixed random gradient; the
// input requires grad, as a pipeline stage's does.
//
//   tools/bazel run //bench:transformer_bench -- --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true      (one command)
#include <benchmark/benchmark.h>

#include <memory>

#include "autograd/attention.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "nn/transformer.h"
#include "tensor/generator.h"

namespace pipewright {
namespace {

constexpr int64_t kBatch = 16, kSeq = 128, kDim = 256, kHeads = 4;

Tensor randn(const Shape& shape, uint64_t seed, bool requires_grad = false) {
  Tensor t = Tensor::empty(shape);
  Generator(seed).normal_(t);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

/// Runs forward(x) and its backward from a fixed gradient per iteration.
template <class Forward>
void run(benchmark::State& state, nn::Module* module, const Shape& shape, Forward forward,
         int64_t tokens = kBatch * kSeq) {
  const Tensor x = randn(shape, 1, /*requires_grad=*/true);
  Tensor y = forward(x);
  const Tensor g = randn(y.shape(), 2);
  for (auto _ : state) {
    if (module != nullptr) module->zero_grad();
    Tensor input = x;
    input.set_grad(Tensor());
    y = forward(x);
    autograd::backward({y}, {g});
  }
  state.counters["tokens/s"] = benchmark::Counter(
      static_cast<double>(tokens) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

nn::AttentionKernel kernel_of(const benchmark::State& state) {
  const nn::AttentionKernel kernels[] = {nn::AttentionKernel::kFused,
                                         nn::AttentionKernel::kReference,
                                         nn::AttentionKernel::kFlash};
  return kernels[state.range(0)];
}

void BM_Block(benchmark::State& state) {
  Generator generator(0);
  GeneratorGuard guard(generator);
  nn::TransformerBlock block(kDim, kHeads, {.kernel = kernel_of(state)});
  run(state, &block, {kBatch, kSeq, kDim}, [&](const Tensor& x) { return block.forward(x); });
}

void BM_Attention(benchmark::State& state) {
  Generator generator(0);
  GeneratorGuard guard(generator);
  nn::CausalSelfAttention attention(kDim, kHeads, {.kernel = kernel_of(state)});
  run(state, &attention, {kBatch, kSeq, kDim},
      [&](const Tensor& x) { return attention.forward(x); });
}

void BM_LongAttention(benchmark::State& state) {
  Generator generator(0);
  GeneratorGuard guard(generator);
  nn::CausalSelfAttention attention(kDim, kHeads, {.kernel = kernel_of(state)});
  const int64_t batch = 2, seq = state.range(1);
  run(state, &attention, {batch, seq, kDim},
      [&](const Tensor& x) { return attention.forward(x); }, batch * seq);
}

void BM_LayerNorm(benchmark::State& state) {
  nn::LayerNorm ln(kDim);
  run(state, &ln, {kBatch, kSeq, kDim}, [&](const Tensor& x) { return ln.forward(x); });
}

void BM_Gelu(benchmark::State& state) {
  run(state, nullptr, {kBatch, kSeq, 4 * kDim}, [](const Tensor& x) { return autograd::gelu(x); });
}

void BM_Mlp(benchmark::State& state) {
  Generator generator(0);
  GeneratorGuard guard(generator);
  nn::MLP mlp(kDim, 4 * kDim);
  run(state, &mlp, {kBatch, kSeq, kDim}, [&](const Tensor& x) { return mlp.forward(x); });
}

void BM_CausalSoftmax(benchmark::State& state) {
  run(state, nullptr, {kBatch, kHeads, kSeq, kSeq},
      [](const Tensor& x) { return autograd::causal_softmax(x, 0.125); });
}

void BM_Sdpa(benchmark::State& state) {  // the tiled core alone: q, k, v [B, H, T, D] given
  const int64_t batch = state.range(0), seq = state.range(1), d = kDim / kHeads;
  const Tensor k = randn({batch, kHeads, seq, d}, 3, true);
  const Tensor v = randn({batch, kHeads, seq, d}, 4, true);
  run(state, nullptr, {batch, kHeads, seq, d},
      [&](const Tensor& q) { return autograd::scaled_dot_product_attention(q, k, v); },
      batch * seq);
}

void BM_AttentionProducts(benchmark::State& state) {  // q·kᵀ then (·)·v, as attention runs them
  const Tensor k = randn({kBatch, kHeads, kSeq, kDim / kHeads}, 3, true);
  run(state, nullptr, {kBatch, kHeads, kSeq, kDim / kHeads}, [&](const Tensor& q) {
    return autograd::batched_matmul(autograd::batched_matmul(q, k, false, true), k);
  });
}

#define PW_TRANSFORMER_BENCH(fn, name) \
  BENCHMARK(fn)->Name(name)->Unit(benchmark::kMillisecond)->UseRealTime()
PW_TRANSFORMER_BENCH(BM_Block, "block")->ArgName("kernel")->DenseRange(0, 2);
PW_TRANSFORMER_BENCH(BM_Attention, "attention")->ArgName("kernel")->DenseRange(0, 2);
PW_TRANSFORMER_BENCH(BM_LongAttention, "long")
    ->ArgNames({"kernel", "T"})
    ->ArgsProduct({{0, 2}, {256, 1024}});
PW_TRANSFORMER_BENCH(BM_LayerNorm, "parts/layer_norm");
PW_TRANSFORMER_BENCH(BM_Gelu, "parts/gelu");
PW_TRANSFORMER_BENCH(BM_Mlp, "parts/mlp");
PW_TRANSFORMER_BENCH(BM_CausalSoftmax, "parts/causal_softmax");
PW_TRANSFORMER_BENCH(BM_AttentionProducts, "parts/attention_products");
PW_TRANSFORMER_BENCH(BM_Sdpa, "parts/sdpa")->ArgNames({"B", "T"})->Args({16, 128})->Args({2, 1024});

}  // namespace
}  // namespace pipewright

BENCHMARK_MAIN();
