// Copies: copy_strided (a strided view into a contiguous tensor) and cast (dtype conversion).
//
// Shape legend: src has `rank` dims of sizes[d] and strides[d] (in elements, any value, the
// offset already applied to the data pointer); dst is contiguous with the same shape; n =
// numel. copy_strided moves elements as raw 4- or 8-byte words, so one kernel serves every
// dtype of that size; cast converts between float32, float64 and int64 (float -> int64
// truncates toward zero, like static_cast).
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

constexpr int kMaxRank = 12;

/// The source layout, passed to the kernel by value (kernel arguments live in constant memory).
struct StridedLayout {
  int rank;
  int64_t sizes[kMaxRank];
  int64_t strides[kMaxRank];
};

/// dst[i] = src at the row-major multi-index of i: peel off the innermost dimension first.
template <class Word>
__global__ void copy_strided_kernel(const Word* src, Word* dst, int64_t n, StridedLayout layout) {
  PW_GRID_STRIDE_LOOP(i, n) {
    int64_t rest = i, pos = 0;
    for (int d = layout.rank - 1; d >= 0; --d) {
      const int64_t size = layout.sizes[d];
      pos += (rest % size) * layout.strides[d];
      rest /= size;
    }
    dst[i] = src[pos];
  }
}

template <class S, class D>
__global__ void cast_kernel(const S* src, D* dst, int64_t n) {
  PW_GRID_STRIDE_LOOP(i, n) { dst[i] = static_cast<D>(src[i]); }
}

}  // namespace

void copy_strided(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (n == 0) return;
  LaunchContext ctx(dst);
  if (src.is_contiguous()) {
    PW_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(),
                                  cudaMemcpyDeviceToDevice, ctx.stream));
    return;
  }
  if (src.dim() > kMaxRank) {
    throw std::invalid_argument("cuda copy_strided: rank " + std::to_string(src.dim()) +
                                " exceeds the supported " + std::to_string(kMaxRank) +
                                " (shape " + src.shape().str() + ")");
  }
  StridedLayout layout{};
  layout.rank = static_cast<int>(src.dim());
  for (int d = 0; d < layout.rank; ++d) {
    layout.sizes[d] = src.shape()[d];
    layout.strides[d] = src.strides()[d];
  }
  if (element_size(src.dtype()) == 4) {
    PW_LAUNCH(copy_strided_kernel<uint32_t>, grid_for(n), kBlock, 0, ctx.stream)(
        static_cast<const uint32_t*>(src.raw_data()), static_cast<uint32_t*>(dst.raw_data()), n,
        layout);
  } else {
    PW_LAUNCH(copy_strided_kernel<uint64_t>, grid_for(n), kBlock, 0, ctx.stream)(
        static_cast<const uint64_t*>(src.raw_data()), static_cast<uint64_t*>(dst.raw_data()), n,
        layout);
  }
  PW_CUDA_CHECK_LAUNCH("copy_strided_kernel");
}

void cast(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (n == 0) return;
  LaunchContext ctx(dst);
  dispatch_all(src.dtype(), "cast", [&](auto src_zero) {
    dispatch_all(dst.dtype(), "cast", [&](auto dst_zero) {
      using S = decltype(src_zero);
      using D = decltype(dst_zero);
      PW_LAUNCH((cast_kernel<S, D>), grid_for(n), kBlock, 0, ctx.stream)(
          src.data<S>(), dst.data<D>(), n);
    });
  });
  PW_CUDA_CHECK_LAUNCH("cast_kernel");
}

}  // namespace pipewright::cuda
