// One training step of an MLP against the GEMMs it contains, in the same binary.
//
// Model (batch B = 256):  784 -> Linear -> BN -> ReLU -> Linear(1024) -> BN -> ReLU -> Linear(10)
//
//   step/mlp           opt.zero_grad(); cross_entropy(model(x), y).backward(); opt.step();
//                      (SGD with momentum 0.9)
//   gemms/eigen        (and gemms/eigen_forward_only: the first 3 of them)
//                      the same 8 matrix products straight through Eigen, on preallocated
//                      row-major matrices (the layout of pipewright's tensors):
//                        forward   [B,784]·W1ᵀ  [B,1024]·W2ᵀ  [B,1024]·W3ᵀ      (y = x·Wᵀ)
//                        backward  dY3·W3  dY3ᵀ·X3  dY2·W2  dY2ᵀ·X2  dY1ᵀ·X1   (no dX1: x is data)
//   parts/forward      forward + loss only (autograd recording on, as in training)
//   parts/forward_backward
//   parts/sgd_step     opt.step() alone on fixed gradients
//   kernels/...        the BatchNorm CPU kernels alone on [256, 1024]; the bias-gradient sum
//                      of [256, 1024] over the batch; sgd_step on one tensor holding as many
//                      values as the model has parameters
//   loops/...          plain single-thread loops doing the same work (yardsticks): BatchNorm
//                      forward and backward, and SGD momentum over all parameters (the
//                      memory-bound floor)
//
// The ratio step/mlp ÷ gemms/eigen is the framework's overhead (target: within 1.15×);
// the parts say where the rest goes. Results: docs/BENCHMARKS.md, "Training step (nn/)".
//
//   tools/bazel run //bench:mlp_step_bench -- --benchmark_repetitions=5
//                   --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "nn/sequential.h"
#include "tensor/generator.h"
#include "tensor/kernels.h"

namespace pipewright {
namespace {

constexpr int64_t kBatch = 256, kIn = 784, kHidden = 1024, kClasses = 10;

// Per-step FLOPs of the 8 GEMMs: 2·M·N·K each.
double gemm_flops() {
  const double b = kBatch, in = kIn, h = kHidden, c = kClasses;
  const double forward = 2 * b * (in * h + h * h + h * c);
  const double backward = 2 * b * (c * h + c * h + h * h + h * h + h * in);
  return forward + backward;
}

void set_flops(benchmark::State& state) {
  state.counters["GEMM_FLOPS"] = benchmark::Counter(
      gemm_flops() * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

struct Setup {
  nn::Sequential model;
  nn::SGD opt;
  Tensor x, y;

  Setup()
      : model(make_model()),
        opt(model.parameters(), {.lr = 0.01, .momentum = 0.9}),
        x(Tensor::empty({kBatch, kIn})) {
    default_generator().uniform_(x, -1.0, 1.0);
    std::vector<int64_t> labels(kBatch);
    for (int64_t i = 0; i < kBatch; ++i) labels[i] = (i * 7) % kClasses;
    y = Tensor::from_vector(labels);
  }

  static nn::Sequential make_model() {
    default_generator().set_state(0, 0);
    return nn::Sequential{nn::Linear(kIn, kHidden),     nn::BatchNorm1d(kHidden), nn::ReLU(),
                          nn::Linear(kHidden, kHidden), nn::BatchNorm1d(kHidden), nn::ReLU(),
                          nn::Linear(kHidden, kClasses)};
  }

  void step() {
    opt.zero_grad();
    nn::cross_entropy(model(x), y).backward();
    opt.step();
  }
};

void step_mlp(benchmark::State& state) {
  Setup s;
  s.step();  // warm-up: momentum buffers exist, allocator is warm
  for (auto _ : state) s.step();
  set_flops(state);
}

void parts_forward(benchmark::State& state) {
  Setup s;
  for (auto _ : state) {
    Tensor loss = nn::cross_entropy(s.model(s.x), s.y);
    benchmark::DoNotOptimize(loss.raw_data());
  }
}

void parts_forward_backward(benchmark::State& state) {
  Setup s;
  for (auto _ : state) {
    s.opt.zero_grad();
    nn::cross_entropy(s.model(s.x), s.y).backward();
  }
}

void parts_sgd_step(benchmark::State& state) {
  Setup s;
  s.step();  // grads and momentum buffers now exist
  for (auto _ : state) s.opt.step();
}

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void gemms_eigen(benchmark::State& state) {
  auto random = [](int64_t r, int64_t c) { return RowMatrix(RowMatrix::Random(r, c)); };
  // Weights [out, in]; activations X1 = x, X2, X3 (inputs of the three Linears).
  const RowMatrix w1 = random(kHidden, kIn), w2 = random(kHidden, kHidden),
                  w3 = random(kClasses, kHidden);
  const RowMatrix x1 = random(kBatch, kIn), x2 = random(kBatch, kHidden),
                  x3 = random(kBatch, kHidden);
  const RowMatrix dy3 = random(kBatch, kClasses), dy2 = random(kBatch, kHidden),
                  dy1 = random(kBatch, kHidden);
  RowMatrix y1(kBatch, kHidden), y2(kBatch, kHidden), y3(kBatch, kClasses);
  RowMatrix dx3(kBatch, kHidden), dw3(kClasses, kHidden), dx2(kBatch, kHidden),
      dw2(kHidden, kHidden), dw1(kHidden, kIn);
  const bool with_backward = state.range(0) != 0;
  for (auto _ : state) {
    y1.noalias() = x1 * w1.transpose();
    y2.noalias() = x2 * w2.transpose();
    y3.noalias() = x3 * w3.transpose();
    if (!with_backward) {
      benchmark::DoNotOptimize(y3.data());
      benchmark::ClobberMemory();
      continue;
    }
    dx3.noalias() = dy3 * w3;
    dw3.noalias() = dy3.transpose() * x3;
    dx2.noalias() = dy2 * w2;
    dw2.noalias() = dy2.transpose() * x2;
    dw1.noalias() = dy1.transpose() * x1;
    benchmark::DoNotOptimize(dw1.data());
    benchmark::ClobberMemory();
  }
  if (with_backward) set_flops(state);
}

// ---- where the non-GEMM time goes: kernels on the step's shapes against plain loops ----

constexpr int64_t kParams = kIn * kHidden + kHidden + 2 * kHidden + kHidden * kHidden + kHidden +
                            2 * kHidden + kHidden * kClasses + kClasses;

Tensor random_tensor(const Shape& shape, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(shape);
  default_generator().uniform_(t, lo, hi);
  return t;
}

// BatchNorm1d on [B, 1024] (L = 1) through the CPU kernel table, forward and backward.
void kernel_batch_norm(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const Device cpu = Device::cpu(0);
  const Tensor x = random_tensor({kBatch, kHidden}), g = random_tensor({kBatch, kHidden});
  const Tensor gamma = random_tensor({kHidden}, 0.5, 1.5), beta = random_tensor({kHidden});
  Tensor y = Tensor::empty({kBatch, kHidden}), mean = Tensor::empty({kHidden}),
         invstd = Tensor::empty({kHidden});
  Tensor gx = Tensor::empty({kBatch, kHidden}), ggamma = Tensor::empty({kHidden}),
         gbeta = Tensor::empty({kHidden});
  Tensor var;  // not wanted (undefined): the library asks for it only for running statistics
  PW_KERNEL(cpu, batch_norm_train)(x, gamma, beta, 1e-5, kBatch, kHidden, 1, y, mean, invstd, var);
  for (auto _ : state) {
    if (backward) {
      PW_KERNEL(cpu, batch_norm_backward)(g, x, gamma, mean, invstd, kBatch, kHidden, 1, gx,
                                          ggamma, gbeta);
    } else {
      PW_KERNEL(cpu, batch_norm_train)(x, gamma, beta, 1e-5, kBatch, kHidden, 1, y, mean,
                                       invstd, var);
    }
    benchmark::ClobberMemory();
  }
}

// The same BatchNorm backward as a plain loop, one thread: samples outer, channels inner
// (contiguous, so the compiler vectorises it), sums in double. A yardstick, not a kernel.
void loop_batch_norm_backward(benchmark::State& state) {
  const Tensor x = random_tensor({kBatch, kHidden}), g = random_tensor({kBatch, kHidden});
  const Tensor gamma = random_tensor({kHidden}, 0.5, 1.5);
  std::vector<float> mean(kHidden, 0.1f), invstd(kHidden, 1.2f), gx(kBatch * kHidden);
  std::vector<double> sum_g(kHidden), sum_gxh(kHidden);
  const float* xs = x.data<float>();
  const float* gs = g.data<float>();
  const float* gam = gamma.data<float>();
  for (auto _ : state) {
    std::fill(sum_g.begin(), sum_g.end(), 0.0);
    std::fill(sum_gxh.begin(), sum_gxh.end(), 0.0);
    for (int64_t n = 0; n < kBatch; ++n) {
      for (int64_t c = 0; c < kHidden; ++c) {
        const double gi = gs[n * kHidden + c];
        sum_g[c] += gi;
        sum_gxh[c] += gi * (xs[n * kHidden + c] - mean[c]) * invstd[c];
      }
    }
    const double m = kBatch;
    for (int64_t n = 0; n < kBatch; ++n) {
      for (int64_t c = 0; c < kHidden; ++c) {
        const double xh = (xs[n * kHidden + c] - mean[c]) * invstd[c];
        gx[n * kHidden + c] = static_cast<float>(gam[c] * invstd[c] / m *
                                                 (m * gs[n * kHidden + c] - sum_g[c] -
                                                  xh * sum_gxh[c]));
      }
    }
    benchmark::DoNotOptimize(gx.data());
    benchmark::ClobberMemory();
  }
}

// BatchNorm training forward as a plain loop, one thread, same layout: per-channel mean and
// biased variance (two passes, double sums), then y = x * scale + shift with
// scale = invstd * gamma, shift = beta - mean * scale (the kernel's own formulation).
void loop_batch_norm_train(benchmark::State& state) {
  const Tensor x = random_tensor({kBatch, kHidden});
  const Tensor gamma = random_tensor({kHidden}, 0.5, 1.5), beta = random_tensor({kHidden});
  std::vector<double> mean(kHidden), var(kHidden);
  std::vector<float> y(kBatch * kHidden), scale(kHidden), shift(kHidden);
  const float* xs = x.data<float>();
  const float* gam = gamma.data<float>();
  const float* bet = beta.data<float>();
  for (auto _ : state) {
    std::fill(mean.begin(), mean.end(), 0.0);
    std::fill(var.begin(), var.end(), 0.0);
    for (int64_t n = 0; n < kBatch; ++n) {
      for (int64_t c = 0; c < kHidden; ++c) mean[c] += xs[n * kHidden + c];
    }
    for (int64_t c = 0; c < kHidden; ++c) mean[c] /= kBatch;
    for (int64_t n = 0; n < kBatch; ++n) {
      for (int64_t c = 0; c < kHidden; ++c) {
        const double d = xs[n * kHidden + c] - mean[c];
        var[c] += d * d;
      }
    }
    for (int64_t c = 0; c < kHidden; ++c) {  // y = x * scale + shift per channel
      const double invstd = 1.0 / std::sqrt(var[c] / kBatch + 1e-5);
      scale[c] = static_cast<float>(invstd * gam[c]);
      shift[c] = static_cast<float>(bet[c] - mean[c] * invstd * gam[c]);
    }
    for (int64_t n = 0; n < kBatch; ++n) {
      for (int64_t c = 0; c < kHidden; ++c) {
        y[n * kHidden + c] = xs[n * kHidden + c] * scale[c] + shift[c];
      }
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}

// Kernels::reduce summing [B, 1024] over the batch: Linear's bias gradient.
void kernel_bias_grad_sum(benchmark::State& state) {
  const Tensor g = random_tensor({kBatch, kHidden});
  Tensor out = Tensor::empty({kHidden});
  for (auto _ : state) {
    PW_KERNEL(Device::cpu(0), reduce)(ReduceOp::kSum, g, 1, kBatch, kHidden, out);
    benchmark::ClobberMemory();
  }
}

// Kernels::sgd_step (momentum 0.9) on one tensor of kParams values: parts/sgd_step without the
// optimizer's per-parameter loop.
void kernel_sgd_step(benchmark::State& state) {
  Tensor p = Tensor::full({kParams}, 1.0), g = Tensor::full({kParams}, 0.5),
         buf = Tensor::full({kParams}, 0.25);
  for (auto _ : state) {
    PW_KERNEL(Device::cpu(0), sgd_step)(p, g, buf, 0.01, 0.9, 0.0, 0.0, false, false);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kParams * 20);
}

// SGD with momentum over all kParams values as one plain loop: the memory-bound floor of
// parts/sgd_step (reads p, g, buf; writes p, buf: 20 bytes per parameter).
void loop_sgd_momentum(benchmark::State& state) {
  std::vector<float> p(kParams, 1.0f), g(kParams, 0.5f), buf(kParams, 0.25f);
  float* __restrict pp = p.data();
  const float* __restrict gg = g.data();
  float* __restrict bb = buf.data();
  for (auto _ : state) {
    for (int64_t i = 0; i < kParams; ++i) {
      bb[i] = 0.9f * bb[i] + gg[i];
      pp[i] -= 0.01f * bb[i];
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kParams * 20);
}

BENCHMARK(step_mlp)->Name("step/mlp")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(gemms_eigen)->Name("gemms/eigen")->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(gemms_eigen)
    ->Name("gemms/eigen_forward_only")
    ->Arg(0)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(parts_forward)->Name("parts/forward")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(parts_forward_backward)
    ->Name("parts/forward_backward")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(parts_sgd_step)->Name("parts/sgd_step")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(kernel_batch_norm)
    ->Name("kernels/batch_norm_train")
    ->Arg(0)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(kernel_batch_norm)
    ->Name("kernels/batch_norm_backward")
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(loop_batch_norm_train)
    ->Name("loops/batch_norm_train_1thread")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(loop_batch_norm_backward)
    ->Name("loops/batch_norm_backward_1thread")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(kernel_bias_grad_sum)
    ->Name("kernels/bias_grad_sum")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(kernel_sgd_step)
    ->Name("kernels/sgd_step")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(loop_sgd_momentum)
    ->Name("loops/sgd_momentum_1thread")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pipewright

BENCHMARK_MAIN();
