// Deferred BatchNorm's running sums (tensor/kernels.h, batch_norm_accumulate): one launch per
// micro-batch and layer where the unfused ops took seven (cast, mul, square, add, mul, add_,
// add_). Shape legend: mean [C] (x's dtype), var, sum, sum_sq [C] float64.
//   sum[ch] += count * mean[ch];  sum_sq[ch] += count * (var[ch] + mean[ch]²)   (in double)
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

template <class T>
__global__ void batch_norm_accumulate_kernel(const T* mean, const double* var, double count,
                                             double* sum, double* sum_sq, int64_t c) {
  PW_GRID_STRIDE_LOOP(ch, c) {
    const double mu = static_cast<double>(mean[ch]);
    sum[ch] += count * mu;
    sum_sq[ch] += count * (var[ch] + mu * mu);
  }
}

}  // namespace

void batch_norm_accumulate(const Tensor& mean, const Tensor& var, double count, Tensor& sum,
                           Tensor& sum_sq) {
  const int64_t c = mean.numel();
  if (c == 0) return;
  LaunchContext ctx(sum);
  dispatch_floating(mean.dtype(), "batch_norm_accumulate", [&](auto zero) {
    using T = decltype(zero);
    PW_LAUNCH(batch_norm_accumulate_kernel<T>, grid_for(c), kBlock, 0, ctx.stream)(
        mean.data<T>(), var.data<double>(), count, sum.data<double>(), sum_sq.data<double>(), c);
  });
  PW_CUDA_CHECK_LAUNCH("batch_norm_accumulate_kernel");
}

}  // namespace pipewright::cuda
