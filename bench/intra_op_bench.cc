// What splitting one CPU kernel over the calling thread's intra-op threads gains or costs at
// the main job's shapes (docs/BENCHMARKS.md, "Step breakdown"): each kernel on 1 and on 2
// threads (run_parts, tensor/parallel.h), called back to back (the helper is still spinning
// when the next call comes) and after a gap longer than the helper's spin (it sleeps, and the
// call has to wake it, as after a serial stretch of a training step).
//
// Kernels, x [R, 512] float32 (R = 64: the main job's micro-batch; 256: its batch):
//   relu, relu_backward        one read, one write per element
//   philox_uniform             the dropout mask's uniforms (compute-bound: Philox4x32-10)
//   batch_norm_train/backward  BatchNorm1d(512)'s training forward and backward
//   gemm x·Wᵀ, dy·W, dyᵀ·x     Linear(512, 512)'s three products
//   cast →bf16, cast bf16→     x to bfloat16 and back (a bf16 policy's operands and working
//                              copies; GCC vectorises tensor/half.h's scalar rules)
//
//   tools/bazel run //bench:intra_op_bench [-- calls]       (default 400 calls per cell)
//
// Prints one markdown table: median µs per call, and 2 threads ÷ 1 thread (below 1: the split
// pays). The configurations run interleaved, in rounds of 20 calls, so a slow moment of the
// machine falls on all of them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "tensor/generator.h"
#include "tensor/kernels.h"
#include "tensor/parallel.h"
#include "tensor/threads.h"

namespace pipewright {
namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  std::string name;
  int64_t rows;
  std::function<void()> call;
};

Tensor uniform(Shape shape) {
  Tensor t = Tensor::empty(std::move(shape));
  default_generator().uniform_(t, -1.0, 1.0);
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Keeps the calling thread busy (its core awake) for `us` microseconds.
void busy_wait(int64_t us) {
  const auto until = Clock::now() + std::chrono::microseconds(us);
  while (Clock::now() < until) {
  }
}

}  // namespace
}  // namespace pipewright

int main(int argc, char** argv) {
  using namespace pipewright;
  const int calls = argc > 1 ? std::max(20, std::atoi(argv[1])) : 400;
  constexpr int kRound = 20;
  // Longer than the helper's spin, so it sleeps between calls.
  const int64_t gap_us = spin_microseconds() + 150;
  const Kernels& k = kernels_for(DeviceType::kCPU);

  std::vector<Case> cases;
  for (int64_t rows : {64, 256}) {
    Tensor x = uniform({rows, 512}), y = uniform({rows, 512}), dy = uniform({rows, 512});
    Tensor w = uniform({512, 512}), dw = uniform({512, 512});
    Tensor gamma = uniform({512}), beta = uniform({512});
    Tensor mean = Tensor::empty({512}), invstd = Tensor::empty({512});
    Tensor var = Tensor::empty({512}, TensorOptions{DType::kFloat64});
    Tensor dgamma = Tensor::empty({512}), dbeta = Tensor::empty({512});
    k.batch_norm_train(x, gamma, beta, 1e-5, rows, 512, 1, y, mean, invstd, var);
    cases.push_back({"relu", rows, [=, &k] {
                       Tensor o = y;
                       k.unary(UnaryOp::kRelu, x, o);
                     }});
    cases.push_back({"relu_backward", rows, [=, &k] {
                       Tensor o = y;
                       k.relu_backward(dy, x, o);
                     }});
    cases.push_back({"philox_uniform", rows, [=, &k] {
                       Tensor o = y;
                       k.philox_uniform(1, 0, 0.0, 1.0, o);
                     }});
    cases.push_back({"batch_norm_train", rows, [=, &k] {
                       Tensor o = y, m = mean, s = invstd, v = var;
                       k.batch_norm_train(x, gamma, beta, 1e-5, rows, 512, 1, o, m, s, v);
                     }});
    cases.push_back({"batch_norm_backward", rows, [=, &k] {
                       Tensor o = y, dg = dgamma, db = dbeta;
                       k.batch_norm_backward(dy, x, gamma, mean, invstd, rows, 512, 1, o, dg, db);
                     }});
    cases.push_back({"gemm x·Wᵀ", rows, [=, &k] {
                       Tensor o = y;
                       k.gemm(false, true, 1.0, x, w, 0.0, o);
                     }});
    cases.push_back({"gemm dy·W", rows, [=, &k] {
                       Tensor o = y;
                       k.gemm(false, false, 1.0, dy, w, 0.0, o);
                     }});
    cases.push_back({"gemm dyᵀ·x", rows, [=, &k] {
                       Tensor o = dw;
                       k.gemm(true, false, 1.0, dy, x, 0.0, o);
                     }});
    Tensor x16 = x.to(DType::kBFloat16), y16 = x16.clone();
    cases.push_back({"cast →bf16", rows, [=, &k] {
                       Tensor o = y16;
                       k.cast(x, o);
                     }});
    cases.push_back({"cast bf16→", rows, [=, &k] {
                       Tensor o = y;
                       k.cast(x16, o);
                     }});
  }

  // times[case][config], config = threads 1/2 × back to back / after a gap
  std::vector<std::vector<std::vector<double>>> times(cases.size(),
                                                      std::vector<std::vector<double>>(4));
  for (int done = 0; done < calls; done += kRound) {
    for (size_t c = 0; c < cases.size(); ++c) {
      for (int config = 0; config < 4; ++config) {
        set_intra_op_threads(config % 2 == 0 ? 1 : 2);
        const bool gap = config >= 2;
        cases[c].call();  // warm: the helper exists and the data is in cache
        for (int r = 0; r < kRound; ++r) {
          if (gap) busy_wait(gap_us);
          const auto start = Clock::now();
          cases[c].call();
          times[c][static_cast<size_t>(config)].push_back(
              std::chrono::duration<double, std::micro>(Clock::now() - start).count());
        }
      }
    }
  }

  std::printf("# intra-op split: %d calls per cell, medians (us); gap %lld us (helper spin %lld "
              "us); %d cores\n\n",
              calls, static_cast<long long>(gap_us), static_cast<long long>(spin_microseconds()),
              hardware_threads());
  std::printf("| kernel | rows | 1 thread | 2 threads | 2 ÷ 1 | after a gap: 1 thread | "
              "2 threads | 2 ÷ 1 |\n|---|---|---|---|---|---|---|---|\n");
  for (size_t c = 0; c < cases.size(); ++c) {
    double m[4];
    for (int config = 0; config < 4; ++config) m[config] = median(times[c][config]);
    std::printf("| %s | %lld | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n",
                cases[c].name.c_str(), static_cast<long long>(cases[c].rows), m[0], m[1],
                m[1] / m[0], m[2], m[3], m[3] / m[2]);
  }
  return 0;
}
