// Tensor::str and operator<<: PyTorch-like printing on one line,
//   tensor([[1, 2], [3, 4]], shape=[2, 2], dtype=float32, device=cpu:0)
// Tensors with more than kSummarizeAbove elements show only the first and last kEdgeItems of
// each dimension, with "..." between (like torch's summarization).
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace pipewright {
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Printer {
  const std::vector<double>& values;  // all elements, row-major
  const std::vector<int64_t>& sizes;
  bool integral;
  bool summarize;
  std::ostringstream out;

  void element(double v) {
    if (integral) {
      out << static_cast<int64_t>(v);
    } else {
      out << v;
    }
  }

  /// Prints dimension `d` of the sub-tensor starting at element `base` (stride `stride`).
  void dim(size_t d, int64_t base, int64_t stride) {
    if (d == sizes.size()) {
      element(values[static_cast<size_t>(base)]);
      return;
    }
    const int64_t size = sizes[d];
    const int64_t inner = stride / std::max<int64_t>(size, 1);
    const bool cut = summarize && size > 2 * kEdgeItems;
    out << "[";
    for (int64_t i = 0; i < size; ++i) {
      if (cut && i == kEdgeItems) {
        out << ", ...";
        i = size - kEdgeItems;
      }
      if (i > 0) out << ", ";
      dim(d + 1, base + i * inner, inner);
    }
    out << "]";
  }
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const std::vector<double> values = to_vector<double>();
  Printer printer{values, shape().dims(), dtype() == DType::kInt64, numel() > kSummarizeAbove,
                  {}};
  printer.out.precision(4);
  printer.dim(0, 0, numel());
  printer.out << ", shape=" << shape().str() << ", dtype=" << dtype_name(dtype())
              << ", device=" << device().str();
  return "tensor(" + printer.out.str() + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace pipewright
