// Optimizer steps, elementwise over one parameter tensor (formulas in tensor/kernels.h, as in
// torch.optim.SGD and torch.optim.Adam/AdamW). Scalar coefficients are computed in double and
// rounded once to the parameter dtype.
#include <cmath>

#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {
namespace {

template <class T>
void sgd_typed(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr,
               double momentum, double dampening, double weight_decay, bool nesterov,
               bool first_step) {
  // The arrays never alias; __restrict lets the compiler vectorise the loop.
  T* __restrict p = param.data<T>();
  const T* __restrict g_in = grad.data<T>();
  T* __restrict buf = momentum != 0.0 ? momentum_buffer.data<T>() : nullptr;
  const T lr_t = static_cast<T>(lr), wd = static_cast<T>(weight_decay),
          mom = static_cast<T>(momentum), keep = static_cast<T>(1.0 - dampening);
  parallel_for(param.numel(), 4, [&](int64_t i, int64_t e) {
    for (; i < e; ++i) {
      T g = g_in[i];
      if (weight_decay != 0.0) g += wd * p[i];
      if (buf != nullptr) {
        buf[i] = first_step ? g : mom * buf[i] + keep * g;
        g = nesterov ? g + mom * buf[i] : buf[i];
      }
      p[i] -= lr_t * g;
    }
  });
}

template <class T>
void adam_typed(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                double lr, double beta1, double beta2, double eps, double weight_decay,
                bool decoupled, int64_t step) {
  // The arrays never alias; __restrict lets the compiler vectorise the loop (8 lanes of
  // division and square root instead of one).
  T* __restrict p = param.data<T>();
  const T* __restrict g_in = grad.data<T>();
  T* __restrict m = exp_avg.data<T>();
  T* __restrict v = exp_avg_sq.data<T>();
  const double t = static_cast<double>(step);
  const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
  const T one_minus_b1 = static_cast<T>(1.0 - beta1), one_minus_b2 = static_cast<T>(1.0 - beta2);
  const T bias1 = static_cast<T>(1.0 - std::pow(beta1, t));
  const T bias2 = static_cast<T>(1.0 - std::pow(beta2, t));
  const T lr_t = static_cast<T>(lr), eps_t = static_cast<T>(eps), wd = static_cast<T>(weight_decay);
  const T decay = static_cast<T>(1.0 - lr * weight_decay);  // AdamW's decoupled shrink
  // decay is 1 and wd 0 unless the option is set, so one branch-free loop serves all cases.
  const T shrink = decoupled ? decay : T(1);
  const T coupled_wd = decoupled ? T(0) : wd;
  parallel_for(param.numel(), 8, [&](int64_t i, int64_t e) {
    for (; i < e; ++i) {
      const T g = g_in[i] + coupled_wd * p[i];
      const T mi = b1 * m[i] + one_minus_b1 * g;
      const T vi = b2 * v[i] + one_minus_b2 * g * g;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * shrink - lr_t * (mi / bias1) / (std::sqrt(vi / bias2) + eps_t);
    }
  });
}

}  // namespace

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr,
              double momentum, double dampening, double weight_decay, bool nesterov,
              bool first_step) {
  dispatch_floating(param.dtype(), "sgd_step", [&](auto zero) {
    sgd_typed<decltype(zero)>(param, grad, momentum_buffer, lr, momentum, dampening,
                              weight_decay, nesterov, first_step);
  });
}

void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
               double lr, double beta1, double beta2, double eps, double weight_decay,
               bool decoupled, int64_t step) {
  if (step < 1) throw std::invalid_argument("adam_step: step must be >= 1, got " +
                                            std::to_string(step));
  dispatch_floating(param.dtype(), "adam_step", [&](auto zero) {
    adam_typed<decltype(zero)>(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps,
                               weight_decay, decoupled, step);
  });
}

}  // namespace pipewright::cpu
