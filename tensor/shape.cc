#include "tensor/shape.h"

#include <stdexcept>

namespace pipewright {

int64_t Shape::wrap_dim(int64_t d) const {
  const int64_t r = rank();
  if (d < -r || d >= r) {
    throw std::out_of_range("dim " + std::to_string(d) + " out of range for rank " +
                            std::to_string(r) + " (shape " + str() + ", valid dims [" +
                            std::to_string(-r) + ", " + std::to_string(r - 1) + "])");
  }
  return d < 0 ? d + r : d;
}

int64_t Shape::operator[](int64_t d) const { return dims_[static_cast<size_t>(wrap_dim(d))]; }

int64_t& Shape::at(int64_t d) { return dims_[static_cast<size_t>(wrap_dim(d))]; }

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t size : dims_) n *= size;
  return n;
}

std::vector<int64_t> Shape::contiguous_strides() const {
  std::vector<int64_t> strides(dims_.size());
  int64_t stride = 1;
  for (size_t i = dims_.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= dims_[i];
  }
  return strides;
}

std::string Shape::str() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

}  // namespace pipewright
