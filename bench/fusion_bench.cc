// What fusing BatchNorm1d -> ReLU -> Dropout could save: the unfused block against the memory
// passes a fused kernel would still make, next to the Linear layer it follows.
//
// Shapes: x [R, 512] float32 (R = 64: the main job's micro-batch; R = 256: its batch), one
// thread (a pipeline worker's budget). Each case runs forward + backward (gradient of ones).
//
//   linear/fwd_bwd       nn::Linear(512, 512): y = x·Wᵀ + b, then dX, dW, db (3 GEMMs + a sum)
//   block/unfused        nn::BatchNorm1d(512) -> nn::ReLU -> nn::Dropout(0.2) in training mode
//                        through autograd, as the main job runs them today: BN forward (2
//                        passes), ReLU, dropout (Philox + mask), then dropout backward (Philox
//                        again), ReLU backward, BN backward (2 passes)
//   block/fused_floor    plain loops making only the passes a fused kernel needs: forward =
//                        per-channel Σx, Σx² (read x) + normalise·ReLU·mask (read x and a
//                        saved mask, write y); backward = Σg', Σg'x̂ (read g, x, mask, y) +
//                        dx (read the same, write dx), g' = g·mask·[y > 0]. The Philox draw
//                        for the mask is not in it: it is timed alone below.
//   philox/uniform       the Philox uniforms for one mask [R, 512] (what a fused forward still
//                        draws once; the unfused block draws them twice)
//
// block/unfused − (block/fused_floor + philox/uniform) bounds what the fusion can save per
// block; relative to linear/fwd_bwd it says what share of a layer that is.
//
// And the optimizer: Adam over the parameters of the main job's second stage (BatchNorm1d(512),
// Linear(512, 512), BatchNorm1d(512), Linear(512, 10): 8 tensors, 269,834 values)
//   adam/per_parameter   one adam_step kernel call per tensor (what nn::Adam does)
//   adam/one_sweep       one call over a single tensor of the same 269,834 values (the floor
//                        of a one-sweep multi-tensor kernel: no per-tensor overhead at all)
//
//   tools/bazel run //bench:fusion_bench -- --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "tensor/generator.h"
#include "tensor/kernels.h"
#include "tensor/threads.h"

namespace pipewright {
namespace {

constexpr int64_t kWidth = 512;

Tensor input(int64_t rows) {
  Tensor x = Tensor::empty({rows, kWidth});
  default_generator().uniform_(x, -1.0, 1.0);
  return x;
}

void linear_fwd_bwd(benchmark::State& state) {
  set_intra_op_threads(1);
  const int64_t rows = state.range(0);
  nn::Linear layer(kWidth, kWidth);
  Tensor x = input(rows).set_requires_grad(true);
  const Tensor ones = Tensor::ones({rows, kWidth});
  for (auto _ : state) {
    layer(x).backward(ones);
    benchmark::DoNotOptimize(x.grad().raw_data());
  }
}

void block_unfused(benchmark::State& state) {
  set_intra_op_threads(1);
  const int64_t rows = state.range(0);
  nn::Sequential block{nn::BatchNorm1d(kWidth), nn::ReLU(), nn::Dropout(0.2)};
  block.train();
  Tensor x = input(rows).set_requires_grad(true);
  const Tensor ones = Tensor::ones({rows, kWidth});
  for (auto _ : state) {
    block(x).backward(ones);
    benchmark::DoNotOptimize(x.grad().raw_data());
  }
}

void block_fused_floor(benchmark::State& state) {
  const int64_t rows = state.range(0), c = kWidth;
  std::vector<float> x(rows * c), mask(rows * c), y(rows * c), g(rows * c, 1.0f), dx(rows * c);
  for (int64_t i = 0; i < rows * c; ++i) {
    x[i] = std::sin(static_cast<float>(i));
    mask[i] = (i % 5 == 0) ? 0.0f : 1.25f;
  }
  std::vector<double> s1(c), s2(c), mean(c), invstd(c);
  for (auto _ : state) {
    // Forward: statistics, then one pass normalise · ReLU · mask.
    std::fill(s1.begin(), s1.end(), 0.0);
    std::fill(s2.begin(), s2.end(), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < c; ++j) {
        const double v = x[r * c + j];
        s1[j] += v;
        s2[j] += v * v;
      }
    }
    for (int64_t j = 0; j < c; ++j) {
      mean[j] = s1[j] / rows;
      invstd[j] = 1.0 / std::sqrt(s2[j] / rows - mean[j] * mean[j] + 1e-5);
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < c; ++j) {
        const double h = (x[r * c + j] - mean[j]) * invstd[j];
        y[r * c + j] = static_cast<float>((h > 0 ? h : 0.0) * mask[r * c + j]);
      }
    }
    // Backward: Σg', Σg'x̂, then dx.
    std::fill(s1.begin(), s1.end(), 0.0);
    std::fill(s2.begin(), s2.end(), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < c; ++j) {
        const int64_t i = r * c + j;
        const double gp = y[i] > 0 ? static_cast<double>(g[i]) * mask[i] : 0.0;
        s1[j] += gp;
        s2[j] += gp * (x[i] - mean[j]) * invstd[j];
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < c; ++j) {
        const int64_t i = r * c + j;
        const double gp = y[i] > 0 ? static_cast<double>(g[i]) * mask[i] : 0.0;
        const double xh = (x[i] - mean[j]) * invstd[j];
        dx[i] = static_cast<float>(invstd[j] / rows * (rows * gp - s1[j] - xh * s2[j]));
      }
    }
    benchmark::DoNotOptimize(dx.data());
    benchmark::ClobberMemory();
  }
}

void philox_uniform(benchmark::State& state) {
  set_intra_op_threads(1);
  Tensor u = Tensor::empty({state.range(0), kWidth});
  for (auto _ : state) {
    default_generator().uniform_(u, 0.0, 1.0);
    benchmark::DoNotOptimize(u.raw_data());
  }
}

const std::vector<int64_t> kStageSizes = {512, 512, 512 * 512, 512, 512, 512, 10 * 512, 10};

struct AdamState {
  Tensor p, g, m, v;
  explicit AdamState(int64_t n)
      : p(Tensor::ones({n})), g(Tensor::ones({n})), m(Tensor::zeros({n})), v(Tensor::zeros({n})) {}
  void step(int64_t t) {
    kernels_for(DeviceType::kCPU).adam_step(p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.0, false, t);
  }
};

void adam_per_parameter(benchmark::State& state) {
  set_intra_op_threads(1);
  std::vector<AdamState> params;
  for (int64_t n : kStageSizes) params.emplace_back(n);
  int64_t t = 0;
  for (auto _ : state) {
    ++t;
    for (AdamState& s : params) s.step(t);
  }
}

void adam_one_sweep(benchmark::State& state) {
  set_intra_op_threads(1);
  int64_t total = 0;
  for (int64_t n : kStageSizes) total += n;
  AdamState all(total);
  int64_t t = 0;
  for (auto _ : state) all.step(++t);
}

BENCHMARK(adam_per_parameter)->Name("adam/per_parameter");
BENCHMARK(adam_one_sweep)->Name("adam/one_sweep");
BENCHMARK(linear_fwd_bwd)->Name("linear/fwd_bwd")->Arg(64)->Arg(256);
BENCHMARK(block_unfused)->Name("block/unfused")->Arg(64)->Arg(256);
BENCHMARK(block_fused_floor)->Name("block/fused_floor")->Arg(64)->Arg(256);
BENCHMARK(philox_uniform)->Name("philox/uniform")->Arg(64)->Arg(256);

}  // namespace
}  // namespace pipewright

BENCHMARK_MAIN();
