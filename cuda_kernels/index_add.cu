// index_add: dst[index[i], :] += src[i, :].
//
// Shape legend: dst [N, R], src [K, R], index [K] int64 (R = elements per row). Every index is
// checked (one thread per index; the first bad position through IndexCheck, thrown as
// std::out_of_range at the thread's next read from the device: Note [Deferred checks], so this
// function does not wait). The adds: the destination rows are cut into ranges (blockIdx.y),
// enough to fill the GPU, and a thread owns one column of one range: it walks the whole index
// in order and adds the source rows whose index falls in its range, skipping a bad index. A
// row named several times receives its source rows in index order, the CPU's order, and no
// two threads write one element: no atomics, the CPU's bits. A warp's threads read the same
// index (one broadcast load) and take the same branch. One thread per column over every row
// was 768 threads for GPT-2's token embedding, each adding all 8 K rows of a batch in a chain
// of dependent reads and writes. Unlike the CPU, which throws before touching dst, the good
// rows are added before the bad index is reported.
// Dtypes: float32 / float64.
#include <algorithm>

#include "cuda_kernels/index_check.h"
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

__global__ void check_indices_kernel(const int64_t* index, int64_t k, int64_t rows,
                                     unsigned long long* bad) {
  PW_GRID_STRIDE_LOOP(i, k) {
    if (index[i] < 0 || index[i] >= rows) atomicMin(bad, static_cast<unsigned long long>(i));
  }
}

/// Columns c (grid-stride over x) of destination rows [blockIdx.y · span, + span) ∩ [0, rows).
template <class T>
__global__ void index_add_kernel(T* dst, const int64_t* index, const T* src, int64_t k,
                                 int64_t width, int64_t rows, int64_t span) {
  const int64_t lo = blockIdx.y * span;
  const int64_t hi = lo + span < rows ? lo + span : rows;
  PW_GRID_STRIDE_LOOP(c, width) {
    for (int64_t i = 0; i < k; ++i) {
      const int64_t row = index[i];
      if (row >= lo && row < hi) dst[row * width + c] += src[i * width + c];
    }
  }
}

}  // namespace

void index_add(Tensor& dst, const Tensor& index, const Tensor& src) {
  const int64_t rows = dst.size(0), k = index.numel();
  const int64_t width = rows == 0 ? 0 : dst.numel() / rows;
  if (k == 0) return;
  LaunchContext ctx(dst);
  IndexCheck check(dst.device(), ctx.stream);
  PW_LAUNCH(check_indices_kernel, grid_for(k), kBlock, 0, ctx.stream)(index.data<int64_t>(), k,
                                                                      rows, check.slot());
  PW_CUDA_CHECK_LAUNCH("check_indices_kernel");
  check.defer([index, rows, shape = dst.shape()](int64_t i) {
    return std::make_exception_ptr(std::out_of_range(
        "index_add_: index " + std::to_string(IndexCheck::read(index, i)) + " at position " +
        std::to_string(i) + " is outside [0, " + std::to_string(rows) + ") for dst of shape " +
        shape.str()));
  });
  if (width == 0) return;
  // Blocks as wide as the row needs (a multiple of 32, at most kBlock), and as many ranges of
  // rows as make kRangeBlocksPerSm blocks per SM (at least one row each).
  constexpr int64_t kRangeBlocksPerSm = 4;
  const int threads = static_cast<int>(std::min<int64_t>(kBlock, (width + 31) / 32 * 32));
  const int64_t blocks =
      std::min<int64_t>((width + threads - 1) / threads, launch_limits().max_grid);
  const int64_t wanted = ranges_to_fill(blocks, rows, kRangeBlocksPerSm, dst.device().index);
  const int64_t span = (rows + wanted - 1) / wanted;
  const int64_t ranges = (rows + span - 1) / span;
  dispatch_floating(dst.dtype(), "index_add", [&](auto zero) {
    using T = decltype(zero);
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(ranges));
    PW_LAUNCH(index_add_kernel<T>, grid, threads, 0, ctx.stream)(
        dst.data<T>(), index.data<int64_t>(), src.data<T>(), k, width, rows, span);
  });
  PW_CUDA_CHECK_LAUNCH("index_add_kernel");
}

}  // namespace pipewright::cuda
