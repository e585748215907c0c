// BatchNorm's running statistics: the batch statistics merged over micro-batches
// (batch_norm_accumulate, one launch per layer and micro-batch) and their commit into the
// running mean, variance and batch count (batch_norm_commit, one launch per layer and step).
// Formulas: tensor/kernels.h. Shape legend: mean [C] (x's dtype), var, acc_mean, acc_m2 [C]
// float64; running_mean, running_var [C] (the module's dtype); num_batches_tracked int64 [1].
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

template <class T>
__global__ void batch_norm_accumulate_kernel(const T* mean, const double* var, double count,
                                             double seen, double* acc_mean, double* acc_m2,
                                             int64_t c) {
  const double n = seen + count;
  PW_GRID_STRIDE_LOOP(ch, c) {
    const double d = static_cast<double>(mean[ch]) - acc_mean[ch];
    acc_mean[ch] += d * count / n;
    acc_m2[ch] += var[ch] * count + d * d * seen * count / n;
  }
}

// One block: every thread reads num_batches_tracked before thread 0 increments it.
template <class T>
__global__ void batch_norm_commit_kernel(const double* mean, const double* m2, double count,
                                         double momentum, T* running_mean, T* running_var,
                                         int64_t* num_batches_tracked, int64_t c,
                                         const double* gate) {
  if (gate != nullptr && !(*gate == 0.0)) return;  // a failed step commits nothing
  const int64_t tracked = *num_batches_tracked;
  const double f = momentum >= 0 ? momentum : 1.0 / static_cast<double>(tracked + 1);
  const double unbiased = count > 1 ? count - 1 : count;
  for (int64_t ch = threadIdx.x; ch < c; ch += blockDim.x) {
    running_mean[ch] =
        static_cast<T>((1.0 - f) * static_cast<double>(running_mean[ch]) + f * mean[ch]);
    running_var[ch] =
        static_cast<T>((1.0 - f) * static_cast<double>(running_var[ch]) + f * m2[ch] / unbiased);
  }
  __syncthreads();
  if (threadIdx.x == 0) *num_batches_tracked = tracked + 1;
}

}  // namespace

void batch_norm_accumulate(const Tensor& mean, const Tensor& var, double count, double seen,
                           Tensor& acc_mean, Tensor& acc_m2) {
  const int64_t c = mean.numel();
  if (c == 0) return;
  LaunchContext ctx(acc_mean);
  dispatch_floating(mean.dtype(), "batch_norm_accumulate", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(batch_norm_accumulate_kernel<T>, grid_for(c), kBlock, 0, ctx.stream)(
        mean.data<T>(), var.data<double>(), count, seen, acc_mean.data<double>(),
        acc_m2.data<double>(), c);
  });
  PW_CUDA_CHECK_LAUNCH("batch_norm_accumulate_kernel");
}

void batch_norm_commit(const Tensor& mean, const Tensor& m2, double count, double momentum,
                       Tensor& running_mean, Tensor& running_var, Tensor& num_batches_tracked,
                       const void* gate) {
  LaunchContext ctx(running_mean);
  const int64_t c = running_mean.numel();
  dispatch_floating(running_mean.dtype(), "batch_norm_commit", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(batch_norm_commit_kernel<T>, dim3(1), kBlock, 0, ctx.stream)(
        mean.data<double>(), m2.data<double>(), count, momentum, running_mean.data<T>(),
        running_var.data<T>(), num_batches_tracked.data<int64_t>(), c,
        static_cast<const double*>(gate));
  });
  PW_CUDA_CHECK_LAUNCH("batch_norm_commit_kernel");
}

}  // namespace pipewright::cuda
