// Cross-entropy with label smoothing on log-probabilities, forward and backward.
//
// Shape legend: N = samples, C = classes; logp [N, C], target [N] int64, loss and grad_loss [N],
// grad_logits [N, C]. Smoothed target q[i, c] = (1 - eps) * onehot(t_i)[c] + eps / C.
//
//   forward:  one block per sample:  loss_i = -(1-eps) logp[i, t_i] - eps/C Σ_c logp[i, c]
//             (the Σ term is skipped when eps == 0, so a -inf elsewhere cannot make NaN)
//   backward: one thread per (i, c): g_i (exp(logp[i, c]) - eps/C) - [c == t_i] g_i (1-eps)
//
// A target outside [0, C) is recorded through IndexCheck (index_check.h) and thrown as
// std::out_of_range at the next read from the device (Note [Deferred checks]): neither function
// waits for its stream.
// Dtypes: logp float32 / float64.
#include "cuda_kernels/index_check.h"
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

template <class T>
__global__ void cross_entropy_kernel(const T* logp, const int64_t* target, T* loss, int64_t n,
                                     int64_t c, T on_target, T per_class, bool smooth,
                                     unsigned long long* bad) {
  __shared__ T shared[32];
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const T* row = logp + i * c;
    T sum = T(0);
    if (smooth) {
      for (int64_t j = threadIdx.x; j < c; j += blockDim.x) sum += row[j];
      sum = block_sum(sum, shared);
    }
    if (threadIdx.x == 0) {
      const int64_t t = target[i];
      if (t < 0 || t >= c) {
        atomicMin(bad, static_cast<unsigned long long>(i));
        loss[i] = T(NAN);
      } else {
        T l = -on_target * row[t];
        if (smooth) l -= per_class * sum;
        loss[i] = l;
      }
    }
  }
}

template <class T>
__global__ void cross_entropy_backward_kernel(const T* logp, const int64_t* target,
                                              const T* grad_loss, T* grad_logits, int64_t n,
                                              int64_t c, T on_target, T per_class,
                                              unsigned long long* bad) {
  PW_GRID_STRIDE_LOOP(k, n * c) {
    const int64_t i = k / c, j = k % c;
    const int64_t t = target[i];
    if (t < 0 || t >= c) {
      if (j == 0) atomicMin(bad, static_cast<unsigned long long>(i));
      grad_logits[k] = T(NAN);
      continue;
    }
    const T g = grad_loss[i];
    T v = g * (exp(logp[k]) - per_class);
    if (j == t) v -= g * on_target;
    grad_logits[k] = v;
  }
}

/// Registers the check: the first bad target becomes std::out_of_range in the CPU kernel's
/// words when it is read.
void defer_bad_target(const char* kernel, IndexCheck& check, const Tensor& target,
                      int64_t classes) {
  check.defer([kernel, target, classes](int64_t i) {
    const int64_t t = IndexCheck::read(target, i);
    return std::make_exception_ptr(std::out_of_range(
        std::string(kernel) + ": target " + std::to_string(t) + " at index " +
        std::to_string(i) + " is outside [0, " + std::to_string(classes) + ")"));
  });
}

}  // namespace

void cross_entropy(const Tensor& logp, const Tensor& target, double eps, Tensor& loss) {
  const int64_t n = logp.size(0), c = logp.size(1);
  if (n == 0) return;
  LaunchContext ctx(loss);
  IndexCheck check(loss.device(), ctx.stream);
  dispatch_floating(logp.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(cross_entropy_kernel<T>, row_grid(n), row_block(c), 0, ctx.stream)(
        logp.data<T>(), target.data<int64_t>(), loss.data<T>(), n, c, static_cast<T>(1.0 - eps),
        static_cast<T>(eps / static_cast<double>(c)), eps != 0.0, check.slot());
  });
  PW_CUDA_CHECK_LAUNCH("cross_entropy_kernel");
  defer_bad_target("cross_entropy", check, target, c);
}

void cross_entropy_backward(const Tensor& logp, const Tensor& target, double eps,
                            const Tensor& grad_loss, Tensor& grad_logits) {
  const int64_t n = logp.size(0), c = logp.size(1);
  if (n * c == 0) return;
  LaunchContext ctx(grad_logits);
  IndexCheck check(grad_logits.device(), ctx.stream);
  dispatch_floating(logp.dtype(), "cross_entropy_backward", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(cross_entropy_backward_kernel<T>, grid_for(n * c), kBlock, 0, ctx.stream)(
        logp.data<T>(), target.data<int64_t>(), grad_loss.data<T>(), grad_logits.data<T>(), n, c,
        static_cast<T>(1.0 - eps), static_cast<T>(eps / static_cast<double>(c)), check.slot());
  });
  PW_CUDA_CHECK_LAUNCH("cross_entropy_backward_kernel");
  defer_bad_target("cross_entropy_backward", check, target, c);
}

}  // namespace pipewright::cuda
