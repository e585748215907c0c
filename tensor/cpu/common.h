// Helpers shared by the CPU kernels: dtype dispatch, Eigen views of tensors, parallel loops.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tensor/tensor.h"
#include "tensor/parallel.h"
#include "tensor/threads.h"

namespace pipewright::cpu {

// ---- dtype dispatch: calls f(T{}) with T the C++ type of the dtype ----

/// What a kernel that computes says of a 16-bit tensor (tensor/half.h: storage only here).
inline std::string half_hint(DType dtype) {
  return is_16_bit(dtype) ? std::string(" (") + dtype_name(dtype) +
                                " tensors are converted, copied and stored; convert with "
                                "to(DType::kFloat32) to compute)"
                          : std::string();
}

/// For kernels defined on float32 and float64 only.
template <class F>
decltype(auto) dispatch_floating(DType dtype, const char* kernel, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    default:
      throw std::invalid_argument(std::string(kernel) + ": expected float32 or float64, got " +
                                  dtype_name(dtype) + half_hint(dtype));
  }
}

/// For kernels defined on float32, float64 and int64.
template <class F>
decltype(auto) dispatch_all(DType dtype, const char* kernel, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kInt64: return f(int64_t{});
    default:
      throw std::invalid_argument(std::string(kernel) + ": expected float32, float64 or int64, "
                                  "got " + dtype_name(dtype) + half_hint(dtype));
  }
}

/// For kernels that only move or convert values (fill, copies, cast): every dtype, the
/// 16-bit ones as BFloat16 / Half (tensor/half.h).
template <class F>
decltype(auto) dispatch_any(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kBFloat16: return f(BFloat16{});
    case DType::kFloat16: return f(Half{});
    default: return dispatch_all(dtype, "dispatch_any", static_cast<F&&>(f));
  }
}

// ---- Eigen views (no copies) ----

template <class T>
using Vec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstVec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
/// Row-major, as tensors are laid out.
template <class T>
using RowMajorArray = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Mat = Eigen::Map<RowMajorArray<T>>;
template <class T>
using ConstMat = Eigen::Map<const RowMajorArray<T>>;

/// All elements of a contiguous tensor as a 1-D array (read-only / writable).
template <class T>
ConstVec<T> in(const Tensor& t) {
  return ConstVec<T>(t.data<T>(), t.numel());
}
template <class T>
Vec<T> out(const Tensor& t) {
  return Vec<T>(t.data<T>(), t.numel());
}

// ---- parallel loops ----

/// Work (in elements) below which a loop stays on the calling thread: waking the helper
/// threads costs a few microseconds, about the time to stream this many floats.
constexpr int64_t kParallelThreshold = 1 << 15;

/// Calls f(begin, end) on consecutive ranges that together cover [0, n). When the total work
/// n * cost_per_item exceeds kParallelThreshold the ranges run on the calling thread's
/// intra-op threads (tensor/threads.h) through run_parts (tensor/parallel.h; Note [Waiting
/// without burning a core]). f must compute each element from its range alone (the ranges'
/// bounds depend on the thread count) and must not throw: kernels validate their inputs
/// before the loop.
template <class F>
void parallel_for(int64_t n, int64_t cost_per_item, const F& f) {
  if (n <= 0) return;
  const bool large = n * std::max<int64_t>(cost_per_item, 1) > kParallelThreshold;
  const int64_t threads = large ? std::min<int64_t>(n, intra_op_threads()) : 1;
  if (threads <= 1) {
    f(0, n);
    return;
  }
  // One part per thread: a thread the scheduler keeps off its core before it takes its part
  // leaves it to the running one (run_parts hands parts out from a shared counter). More
  // parts per thread measured no better beside a busy process and no faster quiet
  // (docs/BENCHMARKS.md, "Contention").
  const int64_t parts = threads;
  run_parts(parts, [&](int64_t p) { f(n * p / parts, n * (p + 1) / parts); });
}

}  // namespace pipewright::cpu
