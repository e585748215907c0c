// Helpers shared by the tensor tests. Reference data comes from std::mt19937, never from the
// code under test, and references are naive loops over std::vector<double>.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "tensor/tensor.h"

namespace pipewright::testing {

/// n values uniform in [lo, hi) from std::mt19937.
inline std::vector<double> random_values(int64_t n, uint32_t seed, double lo = -1.0,
                                         double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = dist(rng);
  return v;
}

/// A CPU tensor of dtype T holding `values` (converted to T).
template <class T>
Tensor tensor_of(const std::vector<double>& values, const Shape& shape) {
  return Tensor::from_vector(std::vector<T>(values.begin(), values.end()), shape);
}

template <class T>
Tensor random_tensor(const Shape& shape, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  return tensor_of<T>(random_values(shape.numel(), seed, lo, hi), shape);
}

/// The values a tensor of T holds for `values` (T's rounding applied), as double.
template <class T>
std::vector<double> rounded(const std::vector<double>& values) {
  std::vector<double> out;
  for (double v : values) out.push_back(static_cast<double>(static_cast<T>(v)));
  return out;
}

/// The transpose of a contiguous 2-D tensor as a strided (non-contiguous) view.
inline Tensor transposed_view(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>(*t.impl());
  impl->shape = Shape{t.size(1), t.size(0)};
  impl->strides = {t.strides()[1], t.strides()[0]};
  return Tensor(impl);
}

/// max_i |a_i - b_i| / (1 + |b_i|): relative for large values, absolute near zero.
inline double max_rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(a[i] - b[i]) / (1.0 + std::fabs(b[i]));
    if (!(e <= worst)) worst = e;  // NaN wins
  }
  return worst;
}

/// A comfortable error bound for results computed in T from exactly representable inputs.
template <class T>
constexpr double tolerance() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

}  // namespace pipewright::testing
