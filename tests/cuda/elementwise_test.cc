// CUDA elementwise kernels against the CPU kernels: fill, binary (three broadcast forms, every
// op), binary_scalar, unary (every op), relu_backward, axpy; at the default launch caps and
// under small caps (kSmallLaunchLimits), where 1,261 elements already wrap every grid-stride
// loop (at the default caps that takes more than 2^24 elements, which cost ~40 s simulated).
// Tolerances: float32 rtol 1e-6 (the CUDA and Eigen exp/log/tanh differ by a few ulp),
// float64 rtol 1e-14; +, -, *, / are correctly rounded on both, so those match exactly.
#include <catch2/catch.hpp>

#include "cuda_kernels/launch_limits.h"
#include "tensor/ops.h"
#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

const DType kFloatTypes[] = {DType::kFloat32, DType::kFloat64};
// 1 element, one partial block, several blocks (default caps; the grid-stride loop past the
// grid is the small-caps test case below).
const int64_t kSizes[] = {1, 257, 70001};
const BinaryOp kBinaryOps[] = {BinaryOp::kAdd, BinaryOp::kSub,  BinaryOp::kMul,
                               BinaryOp::kDiv, BinaryOp::kRSub, BinaryOp::kRDiv};
const UnaryOp kUnaryOps[] = {UnaryOp::kNeg,  UnaryOp::kExp,  UnaryOp::kLog,
                             UnaryOp::kSqrt, UnaryOp::kRelu, UnaryOp::kSquare,
                             UnaryOp::kAbs,  UnaryOp::kTanh, UnaryOp::kSigmoid};

/// unary(op) of x on both devices, compared (float32 rtol 1e-6, float64 1e-14).
void check_unary(UnaryOp op, const Tensor& x) {
  const DType dtype = x.dtype();
  Tensor expected = Tensor::empty(x.shape(), {dtype, Device::cpu(0)});
  Tensor actual = Tensor::empty(x.shape(), {dtype, gpu()});
  cpu_kernels().unary(op, x, expected);
  gpu_kernels().unary(op, x.to(gpu()), actual);
  check_close(actual, expected, tol(dtype, 1e-6, 1e-14), tol(dtype, 1e-7, 1e-15));
}

TEST_CASE("cuda fill matches cpu for every dtype", "[cuda][elementwise]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{100003}}) {
      Tensor expected = Tensor::empty({n}, {dtype, Device::cpu(0)});
      Tensor actual = Tensor::empty({n}, {dtype, gpu()});
      cpu_kernels().fill(expected, -2.5);
      gpu_kernels().fill(actual, -2.5);
      check_bitwise_equal(actual, expected);
    }
  }
}

TEST_CASE("cuda binary matches cpu for every op and broadcast form", "[cuda][elementwise]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : kFloatTypes) {
    const Tensor a = random_tensor({37, 129}, dtype, 1, 0.5, 2.0);  // away from 0: division
    const Shape b_shapes[] = {{37, 129}, {1}, {129}};                // same, scalar, row
    for (const Shape& b_shape : b_shapes) {
      const Tensor b = random_tensor(b_shape, dtype, 2, 0.5, 2.0);
      for (BinaryOp op : kBinaryOps) {
        INFO("dtype " << dtype_name(dtype) << ", b " << b_shape.str() << ", op "
                      << static_cast<int>(op));
        Tensor expected = Tensor::empty(a.shape(), {dtype, Device::cpu(0)});
        Tensor actual = Tensor::empty(a.shape(), {dtype, gpu()});
        cpu_kernels().binary(op, a, b, expected);
        gpu_kernels().binary(op, a.to(gpu()), b.to(gpu()), actual);
        check_bitwise_equal(actual, expected);  // IEEE +-*/ are correctly rounded everywhere
      }
    }
  }
}

TEST_CASE("cuda mul_ by a tensor (the output is the first operand) matches cpu",
          "[cuda][elementwise]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : kFloatTypes) {
    const Shape b_shapes[] = {{37, 129}, {1}, {129}, {}};
    for (const Shape& b_shape : b_shapes) {
      INFO("dtype " << dtype_name(dtype) << ", b " << b_shape.str());
      Tensor expected = random_tensor({37, 129}, dtype, 3, 0.5, 2.0);
      Tensor actual = expected.to(gpu());
      const Tensor b = random_tensor(b_shape, dtype, 4, 0.5, 2.0);
      ops::mul_(expected, b);
      ops::mul_(actual, b.to(gpu()));
      check_bitwise_equal(actual, expected);
    }
  }
}

TEST_CASE("cuda binary_scalar matches cpu", "[cuda][elementwise]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : kFloatTypes) {
    const Tensor a = random_tensor({1000}, dtype, 3, 0.5, 2.0);
    for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv,
                        BinaryOp::kRSub, BinaryOp::kRDiv}) {
      Tensor expected = Tensor::empty(a.shape(), {dtype, Device::cpu(0)});
      Tensor actual = Tensor::empty(a.shape(), {dtype, gpu()});
      cpu_kernels().binary_scalar(op, a, 0.3, expected);
      gpu_kernels().binary_scalar(op, a.to(gpu()), 0.3, actual);
      check_bitwise_equal(actual, expected);
    }
  }
}

TEST_CASE("cuda unary matches cpu for every op", "[cuda][elementwise]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : kFloatTypes) {
    for (int64_t n : kSizes) {
      // log and sqrt need positive inputs; the others see both signs.
      const Tensor mixed = random_tensor({n}, dtype, 4, -4.0, 4.0);
      const Tensor positive = random_tensor({n}, dtype, 5, 1e-3, 8.0);
      for (UnaryOp op : kUnaryOps) {
        INFO("dtype " << dtype_name(dtype) << ", n " << n << ", op " << static_cast<int>(op));
        check_unary(op, (op == UnaryOp::kLog || op == UnaryOp::kSqrt) ? positive : mixed);
      }
    }
  }
}

TEST_CASE("cuda relu_backward and axpy match cpu", "[cuda][elementwise]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : kFloatTypes) {
    const Tensor grad = random_tensor({513, 7}, dtype, 6);
    const Tensor y = random_tensor({513, 7}, dtype, 7);  // about half negative
    Tensor expected = Tensor::empty(grad.shape(), {dtype, Device::cpu(0)});
    Tensor actual = Tensor::empty(grad.shape(), {dtype, gpu()});
    cpu_kernels().relu_backward(grad, y, expected);
    gpu_kernels().relu_backward(grad.to(gpu()), y.to(gpu()), actual);
    check_bitwise_equal(actual, expected);

    Tensor y_cpu = y.clone();
    Tensor y_gpu = y.to(gpu());
    cpu_kernels().axpy(-0.75, grad, y_cpu);
    gpu_kernels().axpy(-0.75, grad.to(gpu()), y_gpu);
    // alpha * x + y may be fused into one FMA on either side: 1 ulp.
    check_close(y_gpu, y_cpu, tol(dtype, 2e-7, 5e-16), tol(dtype, 2e-7, 5e-16));
  }
}

// Every elementwise kernel with its grid-stride loop wrapping: a [13, 97] tensor (1,261
// elements) is 4.9 / 2.5 / 1.6 grid strides at max_grid 1 / 2 / 3, and not a multiple of any.
TEST_CASE("cuda elementwise kernels match cpu past the grid (small launch caps)",
          "[cuda][elementwise][limits]") {
  if (!gpu_available_or_skip()) return;
  const Shape shape{13, 97};
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
      INFO("fill " << dtype_name(dtype));
      Tensor expected = Tensor::empty(shape, {dtype, Device::cpu(0)});
      Tensor actual = Tensor::empty(shape, {dtype, gpu()});
      cpu_kernels().fill(expected, 7.25);
      gpu_kernels().fill(actual, 7.25);
      check_bitwise_equal(actual, expected);
    }
    for (DType dtype : kFloatTypes) {
      INFO("dtype " << dtype_name(dtype));
      const Tensor a = random_tensor(shape, dtype, 8, 0.5, 2.0);
      for (const Shape& b_shape : {shape, Shape{1}, Shape{97}}) {  // same, scalar, row
        const Tensor b = random_tensor(b_shape, dtype, 9, 0.5, 2.0);
        for (BinaryOp op : kBinaryOps) {
          INFO("binary op " << static_cast<int>(op) << ", b " << b_shape.str());
          Tensor expected = Tensor::empty(shape, {dtype, Device::cpu(0)});
          Tensor actual = Tensor::empty(shape, {dtype, gpu()});
          cpu_kernels().binary(op, a, b, expected);
          gpu_kernels().binary(op, a.to(gpu()), b.to(gpu()), actual);
          check_bitwise_equal(actual, expected);
        }
      }
      for (BinaryOp op : kBinaryOps) {
        INFO("binary_scalar op " << static_cast<int>(op));
        Tensor expected = Tensor::empty(shape, {dtype, Device::cpu(0)});
        Tensor actual = Tensor::empty(shape, {dtype, gpu()});
        cpu_kernels().binary_scalar(op, a, -1.375, expected);
        gpu_kernels().binary_scalar(op, a.to(gpu()), -1.375, actual);
        check_bitwise_equal(actual, expected);
      }
      const Tensor mixed = random_tensor(shape, dtype, 10, -4.0, 4.0);
      const Tensor positive = random_tensor(shape, dtype, 11, 1e-3, 8.0);
      for (UnaryOp op : kUnaryOps) {
        INFO("unary op " << static_cast<int>(op));
        check_unary(op, (op == UnaryOp::kLog || op == UnaryOp::kSqrt) ? positive : mixed);
      }
      {
        INFO("relu_backward");
        Tensor expected = Tensor::empty(shape, {dtype, Device::cpu(0)});
        Tensor actual = Tensor::empty(shape, {dtype, gpu()});
        cpu_kernels().relu_backward(a, mixed, expected);
        gpu_kernels().relu_backward(a.to(gpu()), mixed.to(gpu()), actual);
        check_bitwise_equal(actual, expected);
      }
      {
        INFO("axpy");
        Tensor y_cpu = mixed.clone();
        Tensor y_gpu = mixed.to(gpu());
        cpu_kernels().axpy(0.625, a, y_cpu);
        gpu_kernels().axpy(0.625, a.to(gpu()), y_gpu);
        check_close(y_gpu, y_cpu, tol(dtype, 2e-7, 5e-16), tol(dtype, 2e-7, 5e-16));
      }
    }
  }
}

}  // namespace
}  // namespace pipewright::testing
