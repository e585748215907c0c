// Optimizer steps, elementwise over one parameter tensor (formulas in tensor/kernels.h, as in
// torch.optim.SGD and torch.optim.Adam/AdamW). Scalar coefficients are computed in double and
// rounded once to the parameter dtype.
#include <cmath>
#include <type_traits>

#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"
#include "tensor/graph.h"

namespace pipewright::cpu {
namespace {

/// One SGD loop per case (weight decay or not; no momentum, the first momentum step, or a later
/// one; Nesterov or not), so each loop is branch-free and vectorises; __restrict because the
/// arrays never alias. Every case computes the general formula with the disabled terms left
/// out (not multiplied by 0), so its results are those of the general loop bit for bit.
template <class T, bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_loop(T* __restrict p, const T* __restrict g_in, T* __restrict buf, int64_t numel, T lr,
              T wd, T mom, T keep) {
  for (int64_t i = 0; i < numel; ++i) {
    T g = g_in[i];
    if constexpr (kDecay) g += wd * p[i];
    if constexpr (kMomentum) {
      T b;
      if constexpr (kFirst) {
        b = g;
      } else {
        b = mom * buf[i] + keep * g;
      }
      buf[i] = b;
      if constexpr (kNesterov) {
        g = g + mom * b;
      } else {
        g = b;
      }
    }
    p[i] -= lr * g;
  }
}

/// sgd_loop over the whole tensor, split between the intra-op threads.
template <class T, bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_parallel(T* p, const T* g, T* buf, int64_t numel, T lr, T wd, T mom, T keep) {
  parallel_for(numel, 4, [=](int64_t b, int64_t e) {
    sgd_loop<T, kDecay, kMomentum, kFirst, kNesterov>(p + b, g + b, kMomentum ? buf + b : buf,
                                                      e - b, lr, wd, mom, keep);
  });
}

template <class T>
void sgd_typed(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr,
               double momentum, double dampening, double weight_decay, bool nesterov,
               bool first_step) {
  T* p = param.data<T>();
  const T* g = grad.data<T>();
  T* buf = momentum != 0.0 ? momentum_buffer.data<T>() : nullptr;
  const int64_t numel = param.numel();
  const T lr_t = static_cast<T>(lr), wd = static_cast<T>(weight_decay),
          mom = static_cast<T>(momentum), keep = static_cast<T>(1.0 - dampening);
  // Picks sgd_parallel<T, decay, momentum, first, nesterov> from the runtime flags.
  auto run = [&](auto decay) {
    constexpr bool kDecay = decltype(decay)::value;
    if (momentum == 0.0) {
      sgd_parallel<T, kDecay, false, false, false>(p, g, buf, numel, lr_t, wd, mom, keep);
    } else if (first_step) {
      if (nesterov) {
        sgd_parallel<T, kDecay, true, true, true>(p, g, buf, numel, lr_t, wd, mom, keep);
      } else {
        sgd_parallel<T, kDecay, true, true, false>(p, g, buf, numel, lr_t, wd, mom, keep);
      }
    } else if (nesterov) {
      sgd_parallel<T, kDecay, true, false, true>(p, g, buf, numel, lr_t, wd, mom, keep);
    } else {
      sgd_parallel<T, kDecay, true, false, false>(p, g, buf, numel, lr_t, wd, mom, keep);
    }
  };
  if (weight_decay != 0.0) {
    run(std::true_type{});
  } else {
    run(std::false_type{});
  }
}

/// The Adam update of elements [0, numel) of one range; a function of its own so that the
/// __restrict parameters hold inside it (captured by a lambda they would not) and the loop
/// vectorises: 8 lanes of division and square root (correctly rounded, so the same bits as one
/// lane at a time; the tensor library is built with -fno-math-errno, without which the square
/// root stays a scalar call that may set errno).
template <class T>
void adam_loop(T* __restrict p, const T* __restrict g_in, T* __restrict m, T* __restrict v,
               int64_t numel, T b1, T b2, T one_minus_b1, T one_minus_b2, T bias1, T bias2, T lr_t,
               T eps_t, T shrink, T coupled_wd) {
  for (int64_t i = 0; i < numel; ++i) {
    const T g = g_in[i] + coupled_wd * p[i];
    const T mi = b1 * m[i] + one_minus_b1 * g;
    const T vi = b2 * v[i] + one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * shrink - lr_t * (mi / bias1) / (std::sqrt(vi / bias2) + eps_t);
  }
}

/// The per-step values of an Adam update, rounded once to the parameter's dtype.
template <class T>
struct AdamStepValues {
  T lr, bias1, bias2, decay;  // lr, 1 - b1^t, 1 - b2^t, 1 - lr*wd (AdamW's decoupled shrink)
};

template <class T>
void adam_typed(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                AdamStepValues<T> k, double beta1, double beta2, double eps, double weight_decay,
                bool decoupled) {
  T* p = param.data<T>();
  const T* g = grad.data<T>();
  T* m = exp_avg.data<T>();
  T* v = exp_avg_sq.data<T>();
  const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
  const T one_minus_b1 = static_cast<T>(1.0 - beta1), one_minus_b2 = static_cast<T>(1.0 - beta2);
  const T bias1 = k.bias1, bias2 = k.bias2, lr_t = k.lr, decay = k.decay;
  const T eps_t = static_cast<T>(eps), wd = static_cast<T>(weight_decay);
  // decay is 1 and wd 0 unless the option is set, so one branch-free loop serves all cases.
  const T shrink = decoupled ? decay : T(1);
  const T coupled_wd = decoupled ? T(0) : wd;
  parallel_for(param.numel(), 8, [=](int64_t b, int64_t e) {
    adam_loop<T>(p + b, g + b, m + b, v + b, e - b, b1, b2, one_minus_b1, one_minus_b2, bias1,
                 bias2, lr_t, eps_t, shrink, coupled_wd);
  });
}

}  // namespace

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr,
              double momentum, double dampening, double weight_decay, bool nesterov,
              bool first_step) {
  dispatch_floating(param.dtype(), "sgd_step", [&](auto zero) {
    sgd_typed<decltype(zero)>(param, grad, momentum_buffer, lr, momentum, dampening, weight_decay,
                              nesterov, first_step);
  });
}

void sgd_step_indirect(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const void* lr,
                       const void* gate, double momentum, double dampening, double weight_decay,
                       bool nesterov) {
  if (gate_closed(gate)) return;  // a replayed step that failed
  dispatch_floating(param.dtype(), "sgd_step_indirect", [&](auto zero) {
    using T = decltype(zero);
    // The value rounded to T is exact in double: sgd_typed rounds it back to the same T.
    sgd_typed<T>(param, grad, momentum_buffer, static_cast<double>(*static_cast<const T*>(lr)),
                 momentum, dampening, weight_decay, nesterov, false);
  });
}

void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, double lr,
               double beta1, double beta2, double eps, double weight_decay, bool decoupled,
               int64_t step) {
  if (step < 1)
    throw std::invalid_argument("adam_step: step must be >= 1, got " + std::to_string(step));
  const double t = static_cast<double>(step);
  dispatch_floating(param.dtype(), "adam_step", [&](auto zero) {
    using T = decltype(zero);
    const AdamStepValues<T> k{static_cast<T>(lr), static_cast<T>(1.0 - std::pow(beta1, t)),
                              static_cast<T>(1.0 - std::pow(beta2, t)),
                              static_cast<T>(1.0 - lr * weight_decay)};
    adam_typed<T>(param, grad, exp_avg, exp_avg_sq, k, beta1, beta2, eps, weight_decay, decoupled);
  });
}

void adam_step_indirect(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                        const void* coefficients, const void* gate, double beta1, double beta2,
                        double eps, double weight_decay, bool decoupled) {
  if (gate_closed(gate)) return;  // a replayed step that failed
  dispatch_floating(param.dtype(), "adam_step_indirect", [&](auto zero) {
    using T = decltype(zero);
    const T* c = static_cast<const T*>(coefficients);
    adam_typed<T>(param, grad, exp_avg, exp_avg_sq, AdamStepValues<T>{c[0], c[1], c[2], c[3]},
                  beta1, beta2, eps, weight_decay, decoupled);
  });
}

void sgd_step_multi(const std::vector<SgdTensors>& tensors, double lr, double momentum,
                    double dampening, double weight_decay, bool nesterov, bool first_step,
                    const void* lr_at, const void* gate) {
  // On a CPU a call costs nothing to issue: one parameter after another, each with its own
  // kernel's arithmetic.
  for (SgdTensors t : tensors) {
    if (lr_at != nullptr) {
      sgd_step_indirect(t.param, t.grad, t.momentum_buffer, lr_at, gate, momentum, dampening,
                        weight_decay, nesterov);
    } else {
      sgd_step(t.param, t.grad, t.momentum_buffer, lr, momentum, dampening, weight_decay,
               nesterov, first_step);
    }
  }
}

void adam_step_multi(const std::vector<AdamTensors>& tensors, double lr, double beta1,
                     double beta2, double eps, double weight_decay, bool decoupled, int64_t step,
                     const void* coefficients, const void* gate) {
  if (coefficients == nullptr && step < 1) {
    throw std::invalid_argument("adam_step_multi: step must be >= 1, got " +
                                std::to_string(step));
  }
  // On a CPU a call costs nothing to issue: one parameter after another, each with its own
  // kernel's arithmetic and its own 4 values.
  for (size_t k = 0; k < tensors.size(); ++k) {
    AdamTensors t = tensors[k];
    if (coefficients != nullptr) {
      const void* mine =
          static_cast<const char*>(coefficients) + 4 * k * element_size(t.param.dtype());
      adam_step_indirect(t.param, t.grad, t.exp_avg, t.exp_avg_sq, mine, gate, beta1, beta2, eps,
                         weight_decay, decoupled);
    } else {
      adam_step(t.param, t.grad, t.exp_avg, t.exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
                decoupled, step);
    }
  }
}

}  // namespace pipewright::cpu
