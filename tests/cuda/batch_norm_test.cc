// CUDA BatchNorm (train, eval, backward) against the CPU, for 2-D [N, C] (the tiled sums and
// the row pass) and 3-D [N, C, L] (the run sums and the channel walk), with and without affine
// parameters, and with only some gradients wanted, without gamma, with N·L = 0 (N = 0 or
// L = 0); with many row splits of the sums (M large against a split); with misaligned tensors
// (the scalar path where 16-byte accesses would otherwise be taken); and under small launch
// caps (kSmallLaunchLimits), where the sums loop over channel groups past the grid with at most
// max_grid splits, and the elementwise passes' grid-stride loops wrap (C = 300 or 1000
// channels, 2,121-5,000 elements).
// Vector widths (float32 / float64): C or L a multiple of 4 gives 4 / 2 elements per access, a
// multiple of 2 gives 2 / 2, odd gives 1 / 1.
// Tolerances: both sides accumulate in double and round once to the dtype, but add in
// different orders (and the forward shifts its sums by the channel's first value): float32
// rtol/atol 1e-5, float64 1e-12 (backward: x 4, the sums of products of M terms).
#include <catch2/catch.hpp>

#include "cuda_kernels/launch_limits.h"
#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

struct BnShape {
  int64_t n, c, l;
};
const BnShape kShapes[] = {{256, 1024, 1}, {7, 33, 1}, {1000, 3, 1}, {8, 16, 49}, {2, 5, 3001},
                           {1, 4, 1},      {0, 5, 1},  {0, 3, 4},   {4, 3, 0}};
// Under kSmallLaunchLimits (1-3 blocks): 2-D with 4, 10 and 32 tiles of 32 channels, 300 and
// 1000 channels for the one-thread-per-channel kernels; 3-D with 7 and 5 channels of 303 and
// 258 values each (more than a 256-thread block), 2,121-5,000 elements.
const BnShape kSmallCapsShapes[] = {{37, 100, 1}, {3, 300, 1}, {5, 1000, 1}, {3, 7, 101},
                                    {2, 5, 129}};
// Many splits of the sums (a split holds at least 4 units per thread: 1,024 units of a
// channel for L > 1, 4 x 256 / lanes rows for L = 1): [N, C] with 16-24 splits of rows, C
// odd, C = 36 (9 units of 4 in 16 lanes) and C = 100 (25 units in 32 lanes, some idle);
// [N, C, L] with 7-40 splits of units, L odd (1001), L = 522 (a multiple of 2, not 4), L = 400
// (a multiple of 4), none of M a multiple of its split.
const BnShape kSplitShapes[] = {{2000, 5, 1},  {1500, 36, 1}, {700, 100, 1},
                                {40, 3, 1001}, {24, 2, 522},  {64, 3, 400}};

Tensor cpu_empty(Shape s, DType d) { return Tensor::empty(s, {d, Device::cpu(0)}); }
Tensor gpu_empty(Shape s, DType d) { return Tensor::empty(s, {d, gpu()}); }

/// Train (its statistics and the double variance) and eval forward, with and without gamma
/// and beta, on both devices. M = 0 gives NaN statistics on both (NaN equals NaN here).
template <size_t N>
void check_forward(const BnShape (&shapes)[N]) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const BnShape& s : shapes) {
      for (bool affine : {true, false}) {
        INFO(dtype_name(dtype) << " [" << s.n << ", " << s.c << ", " << s.l << "] affine "
                               << affine);
        const Shape xs{s.n, s.c, s.l};
        const Tensor x = random_tensor(xs, dtype, 51, -3.0, 5.0);
        const Tensor gamma = affine ? random_tensor({s.c}, dtype, 52, 0.5, 1.5) : Tensor();
        const Tensor beta = affine ? random_tensor({s.c}, dtype, 53) : Tensor();
        const Tensor gamma_g = affine ? gamma.to(gpu()) : Tensor();
        const Tensor beta_g = affine ? beta.to(gpu()) : Tensor();
        const double t = tol(dtype, 1e-5, 1e-12);

        Tensor y = cpu_empty(xs, dtype), mean = cpu_empty({s.c}, dtype),
               invstd = cpu_empty({s.c}, dtype), var = cpu_empty({s.c}, DType::kFloat64);
        Tensor y_g = gpu_empty(xs, dtype), mean_g = gpu_empty({s.c}, dtype),
               invstd_g = gpu_empty({s.c}, dtype), var_g = gpu_empty({s.c}, DType::kFloat64);
        cpu_kernels().batch_norm_train(x, gamma, beta, 1e-5, s.n, s.c, s.l, y, mean, invstd,
                                       var);
        gpu_kernels().batch_norm_train(x.to(gpu()), gamma_g, beta_g, 1e-5, s.n, s.c, s.l, y_g,
                                       mean_g, invstd_g, var_g);
        check_close(mean_g, mean, t, t);
        check_close(invstd_g, invstd, t, t);
        check_close(var_g, var, 1e-12, 1e-12);  // both in double, summed in different orders
        check_close(y_g, y, t, t);

        const Tensor rm = random_tensor({s.c}, dtype, 54);
        const Tensor rv = random_tensor({s.c}, dtype, 55, 0.5, 2.0);
        Tensor ye = cpu_empty(xs, dtype), ye_g = gpu_empty(xs, dtype);
        cpu_kernels().batch_norm_eval(x, gamma, beta, rm, rv, 1e-5, s.n, s.c, s.l, ye);
        gpu_kernels().batch_norm_eval(x.to(gpu()), gamma_g, beta_g, rm.to(gpu()), rv.to(gpu()),
                                      1e-5, s.n, s.c, s.l, ye_g);
        check_close(ye_g, ye, t, t);
      }
    }
  }
}

TEST_CASE("cuda batch_norm_train and eval match cpu", "[cuda][batch_norm]") {
  if (!gpu_available_or_skip()) return;
  check_forward(kShapes);
}

TEST_CASE("cuda batch_norm_train and eval match cpu past the grid (small launch caps)",
          "[cuda][batch_norm][limits]") {
  if (!gpu_available_or_skip()) return;
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    check_forward(kSmallCapsShapes);
  }
}

TEST_CASE("cuda batch_norm_train and eval match cpu over many splits of the sums",
          "[cuda][batch_norm]") {
  if (!gpu_available_or_skip()) return;
  check_forward(kSplitShapes);
}

/// Backward with every subset of gradients wanted, on both devices, with gamma or without
/// (affine = false: gamma undefined, taken as 1). The statistics come from a CPU training
/// forward, except with M = 0 (its statistics are NaN): there they are finite made-up values,
/// the sums are empty, so grad_gamma = grad_beta = 0 on both devices. With the NaN statistics
/// themselves both kernels give grad_gamma = 0 too, the empty Σ g x̂ of kernels.h and
/// PyTorch's zeros.
template <size_t N>
void check_backward(const BnShape (&shapes)[N]) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const BnShape& s : shapes) {
      for (bool with_gamma : {true, false}) {
        INFO(dtype_name(dtype) << " [" << s.n << ", " << s.c << ", " << s.l << "] gamma "
                               << with_gamma);
        const Shape xs{s.n, s.c, s.l};
        const Tensor x = random_tensor(xs, dtype, 56, -3.0, 5.0);
        const Tensor g = random_tensor(xs, dtype, 57);
        const Tensor gamma = with_gamma ? random_tensor({s.c}, dtype, 58, 0.5, 1.5) : Tensor();
        const Tensor gamma_g = with_gamma ? gamma.to(gpu()) : Tensor();
        Tensor y = cpu_empty(xs, dtype), mean = cpu_empty({s.c}, dtype),
               invstd = cpu_empty({s.c}, dtype);
        Tensor no_var;
        cpu_kernels().batch_norm_train(x, gamma, Tensor(), 1e-5, s.n, s.c, s.l, y, mean, invstd,
                                       no_var);
        if (s.n * s.l == 0) {
          // The training statistics are NaN: the gradients are still the empty sums, 0, on
          // both devices.
          Tensor gg_nan = gpu_empty({s.c}, dtype), gb_nan = gpu_empty({s.c}, dtype), no_x;
          gpu_kernels().batch_norm_backward(g.to(gpu()), x.to(gpu()), gamma_g, mean.to(gpu()),
                                            invstd.to(gpu()), s.n, s.c, s.l, no_x, gg_nan,
                                            gb_nan);
          check_bitwise_equal(gg_nan, Tensor::zeros({s.c}, {dtype, Device::cpu(0)}));
          check_bitwise_equal(gb_nan, Tensor::zeros({s.c}, {dtype, Device::cpu(0)}));
          Tensor gg_cpu = cpu_empty({s.c}, dtype), gb_cpu = cpu_empty({s.c}, dtype);
          cpu_kernels().batch_norm_backward(g, x, gamma, mean, invstd, s.n, s.c, s.l, no_x,
                                            gg_cpu, gb_cpu);
          check_bitwise_equal(gg_cpu, Tensor::zeros({s.c}, {dtype, Device::cpu(0)}));
          check_bitwise_equal(gb_cpu, Tensor::zeros({s.c}, {dtype, Device::cpu(0)}));
          mean = random_tensor({s.c}, dtype, 59);
          invstd = random_tensor({s.c}, dtype, 60, 0.5, 2.0);
        }
        const double t = tol(dtype, 4e-5, 4e-12);
        const double sum_t = t * static_cast<double>(s.n * s.l);  // Σ over M terms

        Tensor gx = cpu_empty(xs, dtype), gg = cpu_empty({s.c}, dtype),
               gb = cpu_empty({s.c}, dtype);
        Tensor gx_g = gpu_empty(xs, dtype), gg_g = gpu_empty({s.c}, dtype),
               gb_g = gpu_empty({s.c}, dtype);
        cpu_kernels().batch_norm_backward(g, x, gamma, mean, invstd, s.n, s.c, s.l, gx, gg, gb);
        gpu_kernels().batch_norm_backward(g.to(gpu()), x.to(gpu()), gamma_g, mean.to(gpu()),
                                          invstd.to(gpu()), s.n, s.c, s.l, gx_g, gg_g, gb_g);
        check_close(gx_g, gx, t, t);
        check_close(gg_g, gg, t, sum_t);
        check_close(gb_g, gb, t, sum_t);

        // Only grad_x wanted (parameters frozen), and only the parameter gradients.
        Tensor none_gamma, none_beta, none_x;
        Tensor gx_only = gpu_empty(xs, dtype);
        gpu_kernels().batch_norm_backward(g.to(gpu()), x.to(gpu()), gamma_g, mean.to(gpu()),
                                          invstd.to(gpu()), s.n, s.c, s.l, gx_only, none_gamma,
                                          none_beta);
        check_close(gx_only, gx, t, t);
        Tensor gg_only = gpu_empty({s.c}, dtype), gb_only = gpu_empty({s.c}, dtype);
        gpu_kernels().batch_norm_backward(g.to(gpu()), x.to(gpu()), gamma_g, mean.to(gpu()),
                                          invstd.to(gpu()), s.n, s.c, s.l, none_x, gg_only,
                                          gb_only);
        check_close(gg_only, gg, t, sum_t);
        check_close(gb_only, gb, t, sum_t);
      }
    }
  }
}

TEST_CASE("cuda batch_norm_backward matches cpu", "[cuda][batch_norm]") {
  if (!gpu_available_or_skip()) return;
  check_backward(kShapes);
}

TEST_CASE("cuda batch_norm_backward matches cpu over many splits of the sums",
          "[cuda][batch_norm]") {
  if (!gpu_available_or_skip()) return;
  check_backward(kSplitShapes);
}

/// A contiguous [n, c, l] GPU tensor whose data starts one element past an aligned address
/// (a view of a larger buffer), holding `values` when given.
Tensor misaligned_gpu(const Shape& shape, DType dtype, const Tensor& values = Tensor()) {
  const int64_t total = shape[0] * shape[1] * shape[2];
  Tensor buffer = gpu_empty({total + 1}, dtype);
  Tensor view = buffer.slice(1, total + 1).reshape(shape);
  if (values.defined()) view.copy_from(values);
  return view;
}

TEST_CASE("cuda batch_norm matches cpu on misaligned tensors (scalar accesses)",
          "[cuda][batch_norm]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const BnShape& s : {BnShape{50, 8, 1}, BnShape{9, 4, 12}}) {
      INFO(dtype_name(dtype) << " [" << s.n << ", " << s.c << ", " << s.l << "]");
      const Shape xs{s.n, s.c, s.l};
      const Tensor x = random_tensor(xs, dtype, 61, -3.0, 5.0);
      const Tensor g = random_tensor(xs, dtype, 62);
      const Tensor gamma = random_tensor({s.c}, dtype, 63, 0.5, 1.5);
      const Tensor beta = random_tensor({s.c}, dtype, 64);
      const Tensor x_g = misaligned_gpu(xs, dtype, x), g_g = misaligned_gpu(xs, dtype, g);
      REQUIRE(reinterpret_cast<uintptr_t>(x_g.raw_data()) % 16 != 0);
      const double t = tol(dtype, 1e-5, 1e-12);

      Tensor y = cpu_empty(xs, dtype), mean = cpu_empty({s.c}, dtype),
             invstd = cpu_empty({s.c}, dtype), no_var;
      Tensor y_g = misaligned_gpu(xs, dtype), mean_g = gpu_empty({s.c}, dtype),
             invstd_g = gpu_empty({s.c}, dtype);
      cpu_kernels().batch_norm_train(x, gamma, beta, 1e-5, s.n, s.c, s.l, y, mean, invstd,
                                     no_var);
      gpu_kernels().batch_norm_train(x_g, gamma.to(gpu()), beta.to(gpu()), 1e-5, s.n, s.c, s.l,
                                     y_g, mean_g, invstd_g, no_var);
      check_close(y_g, y, t, t);
      check_close(mean_g, mean, t, t);
      check_close(invstd_g, invstd, t, t);

      Tensor gx = cpu_empty(xs, dtype), gg = cpu_empty({s.c}, dtype),
             gb = cpu_empty({s.c}, dtype);
      Tensor gx_g = misaligned_gpu(xs, dtype), gg_g = gpu_empty({s.c}, dtype),
             gb_g = gpu_empty({s.c}, dtype);
      cpu_kernels().batch_norm_backward(g, x, gamma, mean, invstd, s.n, s.c, s.l, gx, gg, gb);
      gpu_kernels().batch_norm_backward(g_g, x_g, gamma.to(gpu()), mean.to(gpu()),
                                        invstd.to(gpu()), s.n, s.c, s.l, gx_g, gg_g, gb_g);
      const double bt = tol(dtype, 4e-5, 4e-12);
      check_close(gx_g, gx, bt, bt);
      check_close(gg_g, gg, bt, bt * static_cast<double>(s.n * s.l));
      check_close(gb_g, gb, bt, bt * static_cast<double>(s.n * s.l));
    }
  }
}

TEST_CASE("cuda batch_norm_backward matches cpu past the grid (small launch caps)",
          "[cuda][batch_norm][limits]") {
  if (!gpu_available_or_skip()) return;
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    check_backward(kSmallCapsShapes);
  }
}

TEST_CASE("cuda batch_norm_accumulate and batch_norm_commit match cpu and the closed form",
          "[cuda][batch_norm]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t c : {1, 37, 1000}) {  // 1000: the commit's one block loops over channels
      INFO(dtype_name(dtype) << " C " << c);
      const Tensor mean = random_tensor({c}, dtype, 61, -3.0, 5.0);
      const Tensor var = random_tensor({c}, DType::kFloat64, 62, 0.0, 2.0);
      const Tensor acc_mean0 = random_tensor({c}, DType::kFloat64, 63);
      const Tensor acc_m20 = random_tensor({c}, DType::kFloat64, 64, 0.0, 9.0);
      Tensor acc_mean = acc_mean0.clone(), acc_m2 = acc_m20.clone();
      Tensor acc_mean_g = acc_mean0.to(gpu()), acc_m2_g = acc_m20.to(gpu());
      cpu_kernels().batch_norm_accumulate(mean, var, 96.0, 160.0, acc_mean, acc_m2);
      gpu_kernels().batch_norm_accumulate(mean.to(gpu()), var.to(gpu()), 96.0, 160.0, acc_mean_g,
                                          acc_m2_g);
      const Tensor m = mean.to(DType::kFloat64);
      for (int64_t ch = 0; ch < c; ++ch) {  // Chan et al.: n = 160 + 96
        const double d = m.data<double>()[ch] - acc_mean0.data<double>()[ch];
        CHECK(acc_mean.data<double>()[ch] ==
              Approx(acc_mean0.data<double>()[ch] + d * 96.0 / 256.0).epsilon(1e-14));
        CHECK(acc_m2.data<double>()[ch] ==
              Approx(acc_m20.data<double>()[ch] + var.data<double>()[ch] * 96.0 +
                     d * d * 160.0 * 96.0 / 256.0)
                  .epsilon(1e-14));
      }
      check_close(acc_mean_g, acc_mean, 1e-15, 1e-15);
      check_close(acc_m2_g, acc_m2, 1e-15, 1e-15);

      for (double momentum : {0.1, -1.0}) {  // -1: momentum None, f = 1/(tracked + 1) = 1/8
        INFO("momentum " << momentum);
        const Tensor rm0 = random_tensor({c}, dtype, 65);
        const Tensor rv0 = random_tensor({c}, dtype, 66, 0.5, 2.0);
        Tensor rm = rm0.clone(), rv = rv0.clone(), rm_g = rm0.to(gpu()), rv_g = rv0.to(gpu());
        Tensor tracked = Tensor::full({1}, 7.0, {DType::kInt64, Device::cpu(0)});
        Tensor tracked_g = tracked.to(gpu());
        cpu_kernels().batch_norm_commit(acc_mean, acc_m2, 256.0, momentum, rm, rv, tracked,
                                        nullptr);
        gpu_kernels().batch_norm_commit(acc_mean_g, acc_m2_g, 256.0, momentum, rm_g, rv_g,
                                        tracked_g, nullptr);
        const double f = momentum >= 0 ? momentum : 1.0 / 8.0;
        const Tensor rm0d = rm0.to(DType::kFloat64), rv0d = rv0.to(DType::kFloat64);
        const Tensor rmd = rm.to(DType::kFloat64), rvd = rv.to(DType::kFloat64);
        const double t = tol(dtype, 1e-6, 1e-14);
        for (int64_t ch = 0; ch < c; ++ch) {
          CHECK(rmd.data<double>()[ch] ==
                Approx((1 - f) * rm0d.data<double>()[ch] + f * acc_mean.data<double>()[ch])
                    .epsilon(t).margin(t));
          CHECK(rvd.data<double>()[ch] ==
                Approx((1 - f) * rv0d.data<double>()[ch] + f * acc_m2.data<double>()[ch] / 255.0)
                    .epsilon(t).margin(t));
        }
        CHECK(tracked.data<int64_t>()[0] == 8);
        CHECK(tracked_g.to(Device::cpu(0)).data<int64_t>()[0] == 8);
        check_close(rm_g, rm, t, t);  // the same double arithmetic (nvcc may fuse into FMAs)
        check_close(rv_g, rv, t, t);
      }
    }
  }
}

}  // namespace
}  // namespace pipewright::testing
