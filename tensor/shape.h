// Shape: the sizes of a tensor's dimensions, outermost first (row-major, like PyTorch).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace pipewright {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  /// Size of dimension `d`; negative `d` counts from the end. Throws std::out_of_range.
  int64_t operator[](int64_t d) const;
  int64_t& at(int64_t d);
  /// Product of the sizes (1 for rank 0).
  int64_t numel() const;
  const std::vector<int64_t>& dims() const { return dims_; }
  /// Contiguous (row-major) strides in elements.
  std::vector<int64_t> contiguous_strides() const;
  /// Wraps a possibly negative dimension into [0, rank). Throws std::out_of_range naming both.
  int64_t wrap_dim(int64_t d) const;

  /// "[256, 784]".
  std::string str() const;

  friend bool operator==(const Shape& a, const Shape& b) { return a.dims_ == b.dims_; }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  std::vector<int64_t> dims_;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

}  // namespace pipewright
