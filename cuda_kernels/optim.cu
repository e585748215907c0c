// Fused optimizer steps: one kernel updates a whole parameter tensor and its state in a single
// pass over memory (the formulas of tensor/kernels.h, torch.optim.SGD and Adam/AdamW).
//
// Shape legend: param, grad, momentum_buffer / exp_avg / exp_avg_sq: the same n elements,
// contiguous. Scalar coefficients are computed on the host in double and rounded once to the
// parameter dtype, exactly as the CPU kernels do; per-element arithmetic is in that dtype.
// nvcc fuses a*b+c into FMAs, so results match the CPU to a few ulp, not bit for bit.
// Dtypes: float32 / float64.
#include <cmath>

#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

template <class T>
struct SgdCoefficients {
  T lr, weight_decay, momentum, keep;  // keep = 1 - dampening
  bool use_weight_decay, use_momentum, nesterov, first_step;
};

// `lr_at` (or nullptr): lr read from device memory when the kernel runs; `gate`: nothing is
// written unless it holds 0 (sgd_step_indirect).
template <class T>
__global__ void sgd_kernel(T* p, const T* grad, T* buf, int64_t n, SgdCoefficients<T> k,
                           const T* lr_at, const double* gate) {
  if (gate != nullptr && !(*gate == 0.0)) return;
  if (lr_at != nullptr) k.lr = *lr_at;
  PW_GRID_STRIDE_LOOP(i, n) {
    T g = grad[i];
    if (k.use_weight_decay) g += k.weight_decay * p[i];
    if (k.use_momentum) {
      const T b = k.first_step ? g : k.momentum * buf[i] + k.keep * g;
      buf[i] = b;
      g = k.nesterov ? g + k.momentum * b : b;
    }
    p[i] -= k.lr * g;
  }
}

template <class T>
struct AdamCoefficients {
  T b1, b2, one_minus_b1, one_minus_b2, bias1, bias2, lr, eps, weight_decay, decay;
  bool decoupled, use_weight_decay;
};

// `step_values` (or nullptr): lr, bias1, bias2 and decay read from device memory when the
// kernel runs (adam_step_indirect); the arithmetic is the same either way.
template <class T>
__global__ void adam_kernel(T* p, const T* grad, T* m, T* v, int64_t n, AdamCoefficients<T> k,
                            const T* step_values, const double* gate) {
  if (gate != nullptr && !(*gate == 0.0)) return;  // a failed step: no update
  if (step_values != nullptr) {
    k.lr = step_values[0];
    k.bias1 = step_values[1];
    k.bias2 = step_values[2];
    k.decay = step_values[3];
  }
  PW_GRID_STRIDE_LOOP(i, n) {
    T g = grad[i];
    T param = p[i];
    if (k.decoupled) {
      param *= k.decay;  // AdamW: shrink the weight, not the gradient
    } else if (k.use_weight_decay) {
      g += k.weight_decay * param;
    }
    const T mi = k.b1 * m[i] + k.one_minus_b1 * g;
    const T vi = k.b2 * v[i] + k.one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = param - k.lr * (mi / k.bias1) / (sqrt(vi / k.bias2) + k.eps);
  }
}

}  // namespace

namespace {

/// One fused SGD launch; lr read from `lr_at` (device memory) when given.
void launch_sgd(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr,
                double momentum, double dampening, double weight_decay, bool nesterov,
                bool first_step, const void* lr_at, const void* gate, const char* name) {
  const int64_t n = param.numel();
  if (n == 0) return;
  LaunchContext ctx(param);
  dispatch_floating(param.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    const SgdCoefficients<T> k{static_cast<T>(lr),
                               static_cast<T>(weight_decay),
                               static_cast<T>(momentum),
                               static_cast<T>(1.0 - dampening),
                               weight_decay != 0.0,
                               momentum != 0.0,
                               nesterov,
                               first_step};
    PW_LAUNCH(sgd_kernel<T>, grid_for(n), kBlock, 0, ctx.stream)(
        param.data<T>(), grad.data<T>(), momentum != 0.0 ? momentum_buffer.data<T>() : nullptr,
        n, k, static_cast<const T*>(lr_at), static_cast<const double*>(gate));
  });
  PW_CUDA_CHECK_LAUNCH("sgd_kernel");
}

}  // namespace

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr,
              double momentum, double dampening, double weight_decay, bool nesterov,
              bool first_step) {
  launch_sgd(param, grad, momentum_buffer, lr, momentum, dampening, weight_decay, nesterov,
             first_step, nullptr, nullptr, "sgd_step");
}

void sgd_step_indirect(Tensor& param, const Tensor& grad, Tensor& momentum_buffer,
                       const void* lr, const void* gate, double momentum, double dampening,
                       double weight_decay, bool nesterov) {
  launch_sgd(param, grad, momentum_buffer, 0.0, momentum, dampening, weight_decay, nesterov,
             false, lr, gate, "sgd_step_indirect");
}

namespace {

/// One fused Adam launch. `bias1`, `bias2`, `lr` and `decay` are the step's values, or ignored
/// when `step_values` (device memory) holds them; `gate`: see adam_step_indirect.
void launch_adam(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                 double beta1, double beta2, double eps, double weight_decay, bool decoupled,
                 double bias1, double bias2, double lr, double decay, const void* step_values,
                 const void* gate, const char* name) {
  const int64_t n = param.numel();
  if (n == 0) return;
  LaunchContext ctx(param);
  dispatch_floating(param.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    const AdamCoefficients<T> k{static_cast<T>(beta1),
                                static_cast<T>(beta2),
                                static_cast<T>(1.0 - beta1),
                                static_cast<T>(1.0 - beta2),
                                static_cast<T>(bias1),
                                static_cast<T>(bias2),
                                static_cast<T>(lr),
                                static_cast<T>(eps),
                                static_cast<T>(weight_decay),
                                static_cast<T>(decay),
                                decoupled,
                                weight_decay != 0.0};
    PW_LAUNCH(adam_kernel<T>, grid_for(n), kBlock, 0, ctx.stream)(
        param.data<T>(), grad.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(), n, k,
        static_cast<const T*>(step_values), static_cast<const double*>(gate));
  });
  PW_CUDA_CHECK_LAUNCH("adam_kernel");
}

}  // namespace

void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
               double lr, double beta1, double beta2, double eps, double weight_decay,
               bool decoupled, int64_t step) {
  if (step < 1) {
    throw std::invalid_argument("adam_step: step must be >= 1, got " + std::to_string(step));
  }
  const double t = static_cast<double>(step);
  launch_adam(param, grad, exp_avg, exp_avg_sq, beta1, beta2, eps, weight_decay, decoupled,
              1.0 - std::pow(beta1, t), 1.0 - std::pow(beta2, t), lr, 1.0 - lr * weight_decay,
              nullptr, nullptr, "adam_step");
}

void adam_step_indirect(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                        const void* coefficients, const void* gate, double beta1, double beta2,
                        double eps, double weight_decay, bool decoupled) {
  launch_adam(param, grad, exp_avg, exp_avg_sq, beta1, beta2, eps, weight_decay, decoupled, 1.0,
              1.0, 0.0, 1.0, coefficients, gate, "adam_step_indirect");  // values from memory
}

}  // namespace pipewright::cuda
