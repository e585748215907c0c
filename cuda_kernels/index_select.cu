// index_select along dim 0: out[i, ...] = src[index[i], ...].
//
// Shape legend: src [rows, R...] (R = elements per row), index [K] int64, out [K, R...];
// one thread per output element (K * R). Elements move as raw 2-, 4- or 8-byte words, so any
// dtype works. An index outside [0, rows) is recorded through IndexCheck and thrown as
// std::out_of_range at the thread's next read from the device (Note [Deferred checks]; this
// function does not wait); the rows it would have written are left untouched.
#include "cuda_kernels/index_check.h"
#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

template <class Word>
__global__ void index_select_kernel(const Word* src, const int64_t* index, Word* out, int64_t k,
                                    int64_t row, int64_t rows, unsigned long long* bad) {
  PW_GRID_STRIDE_LOOP(e, k * row) {
    const int64_t i = e / row, r = e % row;
    const int64_t from = index[i];
    if (from < 0 || from >= rows) {
      if (r == 0) atomicMin(bad, static_cast<unsigned long long>(i));
      continue;
    }
    if (out != nullptr) out[e] = src[from * row + r];  // nullptr: rows are empty
  }
}

}  // namespace

void index_select(const Tensor& src, const Tensor& index, Tensor& out) {
  const int64_t rows = src.size(0), k = index.numel();
  const int64_t row = rows == 0 ? 0 : src.numel() / rows;
  if (k == 0) return;
  LaunchContext ctx(out);
  IndexCheck check(out.device(), ctx.stream);
  // With empty rows (row == 0) nothing is copied, but the indices are still checked.
  const int64_t elements = row == 0 ? k : k * row;
  const int64_t row_for_kernel = row == 0 ? 1 : row;
  dispatch_word(src.dtype(), [&](auto zero) {
    using Word = decltype(zero);
    PW_LAUNCH(index_select_kernel<Word>, grid_for(elements), kBlock, 0, ctx.stream)(
        static_cast<const Word*>(src.raw_data()), index.data<int64_t>(),
        row == 0 ? nullptr : static_cast<Word*>(out.raw_data()), k, row_for_kernel, rows,
        check.slot());
  });
  PW_CUDA_CHECK_LAUNCH("index_select_kernel");
  check.defer([index, rows, shape = src.shape()](int64_t i) {
    const int64_t bad = IndexCheck::read(index, i);
    return std::make_exception_ptr(std::out_of_range(
        "index_select: index " + std::to_string(bad) + " at position " + std::to_string(i) +
        " is outside [0, " + std::to_string(rows) + ") for src of shape " + shape.str()));
  });
}

}  // namespace pipewright::cuda
