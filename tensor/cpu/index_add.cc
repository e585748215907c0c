// index_add: dst[index[i], :] += src[i, :]. Shape legend: dst [N, R], src [K, R], index [K]
// (R = elements per row). The row's elements are split across the intra-op threads; each
// thread walks the whole index in order, so a destination row receives its source rows in
// index order whatever the thread count.
#include <string>

#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {

void index_add(Tensor& dst, const Tensor& index, const Tensor& src) {
  const int64_t rows = dst.size(0), k = index.numel();
  const int64_t width = rows == 0 ? 0 : dst.numel() / rows;
  const int64_t* idx = index.data<int64_t>();
  for (int64_t i = 0; i < k; ++i) {  // validate first: nothing may throw inside the loop
    if (idx[i] < 0 || idx[i] >= rows) {
      throw std::out_of_range("index_add_: index " + std::to_string(idx[i]) + " at position " +
                              std::to_string(i) + " is outside [0, " + std::to_string(rows) +
                              ") for dst of shape " + dst.shape().str());
    }
  }
  dispatch_floating(dst.dtype(), "index_add", [&](auto zero) {
    using T = decltype(zero);
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    parallel_for(width, k, [&](int64_t c0, int64_t c1) {
      for (int64_t i = 0; i < k; ++i) {
        Vec<T>(d + idx[i] * width + c0, c1 - c0) += ConstVec<T>(s + i * width + c0, c1 - c0);
      }
    });
  });
}

}  // namespace pipewright::cpu
