// CUDA softmax / log-softmax (+ backward) and cross-entropy (+ backward, label smoothing,
// out-of-range targets) against the CPU; and under small launch caps (kSmallLaunchLimits),
// where 7-37 rows loop past the grid, rows of 33-1000 are strided by 32- or 64-thread blocks,
// and the cross-entropy backward's grid-stride loop wraps.
// Tolerances: float32 rtol 1e-5 / atol 1e-6 (exp, log and the row sums differ by a few ulp),
// float64 rtol 1e-13 / atol 1e-14.
#include <catch2/catch.hpp>

#include <vector>

#include "cuda_kernels/launch_limits.h"
#include "tensor/deferred_check.h"
#include "tensor/stream.h"
#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

struct RowShape {
  int64_t rows, cols;
};
// 10 classes (MNIST), one wide row, a row longer than a block, many short rows.
const RowShape kShapes[] = {{256, 10}, {1, 50000}, {3, 1025}, {4097, 3}, {5, 1}};

// Under kSmallLaunchLimits: rows past 1-3 blocks, rows shorter than a warp, one warp and a
// bit, and several block-widths long.
const RowShape kSmallCapsShapes[] = {{10, 3}, {37, 100}, {5, 1000}, {7, 33}};

template <size_t N>
void check_softmax_shapes(const RowShape (&shapes)[N]) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const RowShape& s : shapes) {
      for (bool log : {false, true}) {
        INFO(dtype_name(dtype) << " [" << s.rows << ", " << s.cols << "] log " << log);
        const Tensor x = random_tensor({s.rows, s.cols}, dtype, 41, -10.0, 10.0);
        Tensor y_cpu = Tensor::empty(x.shape(), {dtype, Device::cpu(0)});
        Tensor y_gpu = Tensor::empty(x.shape(), {dtype, gpu()});
        cpu_kernels().softmax(x, log, y_cpu);
        gpu_kernels().softmax(x.to(gpu()), log, y_gpu);
        check_close(y_gpu, y_cpu, tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-6, 1e-14));

        const Tensor g = random_tensor(x.shape(), dtype, 42);
        Tensor gx_cpu = Tensor::empty(x.shape(), {dtype, Device::cpu(0)});
        Tensor gx_gpu = Tensor::empty(x.shape(), {dtype, gpu()});
        cpu_kernels().softmax_backward(g, y_cpu, log, gx_cpu);
        gpu_kernels().softmax_backward(g.to(gpu()), y_cpu.to(gpu()), log, gx_gpu);
        const double width = static_cast<double>(s.cols);  // Σ over the row enters every entry
        check_close(gx_gpu, gx_cpu, tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-6, 1e-14) * width);
      }
    }
  }
}

TEST_CASE("cuda softmax and log-softmax match cpu, forward and backward", "[cuda][softmax]") {
  if (!gpu_available_or_skip()) return;
  check_softmax_shapes(kShapes);
}

TEST_CASE("cuda softmax and log-softmax match cpu past the grid (small launch caps)",
          "[cuda][softmax][limits]") {
  if (!gpu_available_or_skip()) return;
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    check_softmax_shapes(kSmallCapsShapes);
  }
}

template <size_t N>
void check_cross_entropy_shapes(const RowShape (&shapes)[N]) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const RowShape& s : shapes) {
      for (double eps : {0.0, 0.1}) {
        INFO(dtype_name(dtype) << " [" << s.rows << ", " << s.cols << "] eps " << eps);
        Tensor logp = Tensor::empty({s.rows, s.cols}, {dtype, Device::cpu(0)});
        cpu_kernels().softmax(random_tensor({s.rows, s.cols}, dtype, 43, -5, 5), true, logp);
        const Tensor target = random_indices({s.rows}, s.cols, 44);
        Tensor loss_cpu = Tensor::empty({s.rows}, {dtype, Device::cpu(0)});
        Tensor loss_gpu = Tensor::empty({s.rows}, {dtype, gpu()});
        cpu_kernels().cross_entropy(logp, target, eps, loss_cpu);
        gpu_kernels().cross_entropy(logp.to(gpu()), target.to(gpu()), eps, loss_gpu);
        const double width = static_cast<double>(s.cols);
        check_close(loss_gpu, loss_cpu, tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-6, 1e-14) * width);

        const Tensor g = random_tensor({s.rows}, dtype, 45);
        Tensor gl_cpu = Tensor::empty(logp.shape(), {dtype, Device::cpu(0)});
        Tensor gl_gpu = Tensor::empty(logp.shape(), {dtype, gpu()});
        cpu_kernels().cross_entropy_backward(logp, target, eps, g, gl_cpu);
        gpu_kernels().cross_entropy_backward(logp.to(gpu()), target.to(gpu()), eps, g.to(gpu()),
                                             gl_gpu);
        check_close(gl_gpu, gl_cpu, tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-6, 1e-14));
      }
    }
  }
}

TEST_CASE("cuda cross-entropy matches cpu, with and without label smoothing",
          "[cuda][cross_entropy]") {
  if (!gpu_available_or_skip()) return;
  check_cross_entropy_shapes(kShapes);
}

TEST_CASE("cuda cross-entropy matches cpu past the grid (small launch caps)",
          "[cuda][cross_entropy][limits]") {
  if (!gpu_available_or_skip()) return;
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    check_cross_entropy_shapes(kSmallCapsShapes);
  }
}

// The first bad target is found wherever the loops put it: rows 29 and 20 are reached in
// later row-loop iterations (and later grid strides of the backward) than row 35's block
// starts, and the error names row 20, the lowest, like the CPU.
TEST_CASE("cuda cross-entropy names the first bad target past the grid", "[cuda][cross_entropy][limits]") {
  if (!gpu_available_or_skip()) return;
  const int64_t n = 37, c = 100;
  std::vector<int64_t> targets = random_indices({n}, c, 46).to_vector<int64_t>();
  targets[35] = c;
  targets[29] = -3;
  targets[20] = c + 7;
  const Tensor target = Tensor::from_vector(targets, Device::cpu(0));
  const Tensor logp = Tensor::zeros({n, c}, {DType::kFloat64, Device::cpu(0)});
  const Tensor g = Tensor::ones({n}, {DType::kFloat64, Device::cpu(0)});
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    for (double eps : {0.0, 0.1}) {
      Tensor loss = Tensor::empty({n}, {DType::kFloat64, gpu()});
      CHECK_THROWS_WITH(run_and_read([&] {
                          gpu_kernels().cross_entropy(logp.to(gpu()), target.to(gpu()), eps, loss);
                        }),
                        "cross_entropy: target 107 at index 20 is outside [0, 100)");
      Tensor grad = Tensor::empty({n, c}, {DType::kFloat64, gpu()});
      CHECK_THROWS_WITH(run_and_read([&] {
                          gpu_kernels().cross_entropy_backward(logp.to(gpu()), target.to(gpu()),
                                                               eps, g.to(gpu()), grad);
                        }),
                        "cross_entropy_backward: target 107 at index 20 is outside [0, 100)");
    }
  }
  Tensor loss = Tensor::empty({n}, {DType::kFloat64, Device::cpu(0)});
  CHECK_THROWS_WITH(cpu_kernels().cross_entropy(logp, target, 0.0, loss),
                    "cross_entropy: target 107 at index 20 is outside [0, 100)");
}

TEST_CASE("cuda cross-entropy throws out_of_range naming the first bad target",
          "[cuda][cross_entropy]") {
  if (!gpu_available_or_skip()) return;
  const Tensor logp = Tensor::zeros({4, 3}, {DType::kFloat32, gpu()});
  const Tensor target = Tensor::from_vector<int64_t>({0, 2, 3, -1}, gpu());
  Tensor loss = Tensor::empty({4}, {DType::kFloat32, gpu()});
  // Queued without a wait (Note [Deferred checks]); the thread's next read raises it, once.
  CHECK_NOTHROW(gpu_kernels().cross_entropy(logp, target, 0.0, loss));
  CHECK_THROWS_WITH(loss.to(Device::cpu(0)), "cross_entropy: target 3 at index 2 is outside [0, 3)");
  const Tensor g = Tensor::ones({4}, {DType::kFloat32, gpu()});
  Tensor grad = Tensor::empty({4, 3}, {DType::kFloat32, gpu()});
  gpu_kernels().cross_entropy_backward(logp, target, 0.0, g, grad);
  CHECK_THROWS_WITH(Stream::current(gpu()).synchronize(),
                    "cross_entropy_backward: target 3 at index 2 is outside [0, 3)");
  // Nothing is left pending, and the stream is still usable afterwards.
  CHECK(take_deferred_checks().empty());
  const Tensor good = Tensor::from_vector<int64_t>({0, 1, 2, 0}, gpu());
  gpu_kernels().cross_entropy(logp, good, 0.0, loss);
  CHECK_NOTHROW(loss.to(Device::cpu(0)));
}

}  // namespace
}  // namespace pipewright::testing
