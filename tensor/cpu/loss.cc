// Cross-entropy with label smoothing on log-probabilities.
// Shape legend: N = samples, C = classes; logp [N, C], target [N] int64, loss / grad_loss [N].
// Smoothed target distribution q[i, c] = (1 - eps) * onehot(t_i)[c] + eps / C.
#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {
namespace {

/// Throws std::out_of_range naming the first target outside [0, C). Runs before the parallel
/// loops, which must not throw.
void check_targets(const char* kernel, const Tensor& target, int64_t classes) {
  const int64_t* t = target.data<int64_t>();
  for (int64_t i = 0; i < target.numel(); ++i) {
    if (t[i] < 0 || t[i] >= classes) {
      throw std::out_of_range(std::string(kernel) + ": target " + std::to_string(t[i]) +
                              " at index " + std::to_string(i) + " is outside [0, " +
                              std::to_string(classes) + ")");
    }
  }
}

template <class T>
void cross_entropy_typed(const Tensor& logp, const Tensor& target, double eps, Tensor& loss) {
  const int64_t n = logp.size(0), c = logp.size(1);
  const T* lp = logp.data<T>();
  const int64_t* t = target.data<int64_t>();
  T* l = loss.data<T>();
  const T on_target = static_cast<T>(1.0 - eps), per_class = static_cast<T>(eps / c);
  parallel_for(n, c, [&](int64_t i, int64_t e) {
    for (; i < e; ++i) {
      const T* row = lp + i * c;
      l[i] = -on_target * row[t[i]];
      // Skipped when eps == 0 so that a -inf log-probability of another class cannot turn
      // the loss into 0 * -inf = NaN.
      if (eps != 0.0) l[i] -= per_class * ConstVec<T>(row, c).sum();
    }
  });
}

template <class T>
void cross_entropy_backward_typed(const Tensor& logp, const Tensor& target, double eps,
                                  const Tensor& grad_loss, Tensor& grad_logits) {
  const int64_t n = logp.size(0), c = logp.size(1);
  const int64_t* t = target.data<int64_t>();
  const T* g = grad_loss.data<T>();
  const T on_target = static_cast<T>(1.0 - eps), per_class = static_cast<T>(eps / c);
  parallel_for(n, 4 * c, [&](int64_t i, int64_t e) {
    for (; i < e; ++i) {
      Vec<T> out_row(grad_logits.data<T>() + i * c, c);
      out_row = g[i] * (ConstVec<T>(logp.data<T>() + i * c, c).exp() - per_class);
      out_row[t[i]] -= g[i] * on_target;
    }
  });
}

}  // namespace

void cross_entropy(const Tensor& logp, const Tensor& target, double eps, Tensor& loss) {
  check_targets("cross_entropy", target, logp.size(1));
  dispatch_floating(logp.dtype(), "cross_entropy", [&](auto zero) {
    cross_entropy_typed<decltype(zero)>(logp, target, eps, loss);
  });
}

void cross_entropy_backward(const Tensor& logp, const Tensor& target, double eps,
                            const Tensor& grad_loss, Tensor& grad_logits) {
  check_targets("cross_entropy_backward", target, logp.size(1));
  dispatch_floating(logp.dtype(), "cross_entropy_backward", [&](auto zero) {
    cross_entropy_backward_typed<decltype(zero)>(logp, target, eps, grad_loss, grad_logits);
  });
}

}  // namespace pipewright::cpu
