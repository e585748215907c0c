// Argument checks shared by the op files beside ops.cc (views.cc, batched_matmul.cc, masking.cc,
// attention.cc, gelu.cc, normalization.cc, index_add.cc): each throws std::invalid_argument whose message
// starts with the op's name and names the offending tensors ("layer_norm: expected float32 or
// float64, got [2, 3] int64 on cpu:0").
#pragma once

#include <string>

#include "tensor/tensor.h"

namespace pipewright::ops::detail {

/// "[2, 3] float32 on cpu:0".
inline std::string describe(const Tensor& t) {
  return t.shape().str() + " " + dtype_name(t.dtype()) + " on " + t.device().str();
}

inline void check_defined(const char* op, const Tensor& t) {
  if (!t.defined()) throw std::invalid_argument(std::string(op) + ": undefined tensor");
}

/// Defined, float32 or float64.
inline void check_floating(const char* op, const Tensor& t) {
  check_defined(op, t);
  if (!is_floating(t.dtype())) {
    throw std::invalid_argument(std::string(op) + ": expected float32 or float64, got " +
                                describe(t));
  }
}

/// Both defined, same device and dtype.
inline void check_like(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a);
  check_defined(op, b);
  if (a.device() != b.device() || a.dtype() != b.dtype()) {
    throw std::invalid_argument(std::string(op) + ": operands differ: " + describe(a) + " vs " +
                                describe(b));
  }
}

/// Same shape (after check_like).
inline void check_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) {
    throw std::invalid_argument(std::string(op) + ": shapes differ: " + describe(a) + " vs " +
                                describe(b));
  }
}

/// x contiguous as [B, R, C] over its last two dims, B the product of the others (x of rank
/// >= 2, else throws naming op and x).
inline Tensor as_matrices(const char* op, const Tensor& x) {
  check_defined(op, x);
  if (x.dim() < 2) {
    throw std::invalid_argument(std::string(op) + ": expected rank >= 2, got " + describe(x));
  }
  int64_t batch = 1;
  for (int64_t d = 0; d + 2 < x.dim(); ++d) batch *= x.size(d);
  return x.contiguous().reshape(Shape{batch, x.size(-2), x.size(-1)});
}

/// An uninitialised contiguous tensor of t's shape, dtype and device.
inline Tensor empty_like(const Tensor& t) {
  return Tensor::empty(t.shape(), {t.dtype(), t.device()});
}

}  // namespace pipewright::ops::detail
