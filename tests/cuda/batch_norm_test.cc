// CUDA BatchNorm (train, eval, backward) against the CPU, for 2-D [N, C] (the tiled layout)
// and 3-D [N, C, L] (one block per channel), with and without affine parameters, and with
// only some gradients wanted.
// Tolerances: both sides accumulate in double and round once to the dtype, but add in
// different orders: float32 rtol/atol 1e-5, float64 1e-12 (backward: x 4, the sums of
// products of M terms).
#include <catch2/catch.hpp>

#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

struct BnShape {
  int64_t n, c, l;
};
const BnShape kShapes[] = {{256, 1024, 1}, {7, 33, 1}, {1000, 3, 1}, {8, 16, 49}, {2, 5, 3001},
                           {1, 4, 1}};

Tensor cpu_empty(Shape s, DType d) { return Tensor::empty(s, {d, Device::cpu(0)}); }
Tensor gpu_empty(Shape s, DType d) { return Tensor::empty(s, {d, gpu()}); }

TEST_CASE("cuda batch_norm_train and eval match cpu", "[cuda][batch_norm]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const BnShape& s : kShapes) {
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

TEST_CASE("cuda batch_norm_backward matches cpu", "[cuda][batch_norm]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const BnShape& s : kShapes) {
      INFO(dtype_name(dtype) << " [" << s.n << ", " << s.c << ", " << s.l << "]");
      const Shape xs{s.n, s.c, s.l};
      const Tensor x = random_tensor(xs, dtype, 56, -3.0, 5.0);
      const Tensor g = random_tensor(xs, dtype, 57);
      const Tensor gamma = random_tensor({s.c}, dtype, 58, 0.5, 1.5);
      Tensor y = cpu_empty(xs, dtype), mean = cpu_empty({s.c}, dtype),
             invstd = cpu_empty({s.c}, dtype);
      Tensor no_var;
      cpu_kernels().batch_norm_train(x, gamma, Tensor(), 1e-5, s.n, s.c, s.l, y, mean, invstd,
                                     no_var);
      const double t = tol(dtype, 4e-5, 4e-12);
      const double sum_t = t * static_cast<double>(s.n * s.l);  // Σ over M terms

      Tensor gx = cpu_empty(xs, dtype), gg = cpu_empty({s.c}, dtype), gb = cpu_empty({s.c}, dtype);
      Tensor gx_g = gpu_empty(xs, dtype), gg_g = gpu_empty({s.c}, dtype),
             gb_g = gpu_empty({s.c}, dtype);
      cpu_kernels().batch_norm_backward(g, x, gamma, mean, invstd, s.n, s.c, s.l, gx, gg, gb);
      gpu_kernels().batch_norm_backward(g.to(gpu()), x.to(gpu()), gamma.to(gpu()), mean.to(gpu()),
                                        invstd.to(gpu()), s.n, s.c, s.l, gx_g, gg_g, gb_g);
      check_close(gx_g, gx, t, t);
      check_close(gg_g, gg, t, sum_t);
      check_close(gb_g, gb, t, sum_t);

      // Only grad_x wanted (parameters frozen), and only the parameter gradients.
      Tensor none_gamma, none_beta, none_x;
      Tensor gx_only = gpu_empty(xs, dtype);
      gpu_kernels().batch_norm_backward(g.to(gpu()), x.to(gpu()), gamma.to(gpu()), mean.to(gpu()),
                                        invstd.to(gpu()), s.n, s.c, s.l, gx_only, none_gamma,
                                        none_beta);
      check_close(gx_only, gx, t, t);
      Tensor gg_only = gpu_empty({s.c}, dtype), gb_only = gpu_empty({s.c}, dtype);
      gpu_kernels().batch_norm_backward(g.to(gpu()), x.to(gpu()), gamma.to(gpu()), mean.to(gpu()),
                                        invstd.to(gpu()), s.n, s.c, s.l, none_x, gg_only,
                                        gb_only);
      check_close(gg_only, gg, t, sum_t);
      check_close(gb_only, gb, t, sum_t);
    }
  }
}

}  // namespace
}  // namespace pipewright::testing
