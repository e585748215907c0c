// Copies: copy_strided (a strided view into a contiguous tensor) and cast (dtype conversion).
//
// Shape legend: src has `rank` dims of sizes[d] and strides[d] (in elements, any value, the
// offset already applied to the data pointer); dst is contiguous with the same shape; n =
// numel. copy_strided moves elements as raw 2-, 4- or 8-byte words, so one kernel serves every
// dtype of that size; cast converts between float32, float64, int64, bfloat16 and float16
// (float -> int64 truncates toward zero, like static_cast; a 16-bit side rounds to nearest
// even through float32, tensor/half.h).
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

/// A 16-bit side converts through float32 (tensor/half.h), as on the CPU.
template <class S, class D>
__global__ void cast_kernel(const S* src, D* dst, int64_t n) {
  PW_GRID_STRIDE_LOOP(i, n) {
    if constexpr (is_half_type<S> || is_half_type<D>) {
      dst[i] = D(static_cast<float>(src[i]));
    } else {
      dst[i] = static_cast<D>(src[i]);
    }
  }
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
  dispatch_word(src.dtype(), [&](auto zero) {
    using Word = decltype(zero);
    PW_LAUNCH(copy_strided_kernel<Word>, grid_for(n), kBlock, 0, ctx.stream)(
        static_cast<const Word*>(src.raw_data()), static_cast<Word*>(dst.raw_data()), n, layout);
  });
  PW_CUDA_CHECK_LAUNCH("copy_strided_kernel");
}

void cast(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (n == 0) return;
  LaunchContext ctx(dst);
  dispatch_any(src.dtype(), "cast", [&](auto src_zero) {
    dispatch_any(dst.dtype(), "cast", [&](auto dst_zero) {
      using S = decltype(src_zero);
      using D = decltype(dst_zero);
      PW_LAUNCH((cast_kernel<S, D>), grid_for(n), kBlock, 0, ctx.stream)(
          src.data<S>(), dst.data<D>(), n);
    });
  });
  PW_CUDA_CHECK_LAUNCH("cast_kernel");
}

}  // namespace pipewright::cuda
