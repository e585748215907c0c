// The median every measurement here takes: the planner's profile, runtime-overhead probe and
// trials, balance_by_time's per-layer times, the benchmarks.
#pragma once

#include <algorithm>
#include <type_traits>
#include <vector>

namespace pipewright::pipeline {

/// The middle value of `values`: for an even count the mean of the two middle ones (for an
/// integer type a + (b - a) / 2, rounded toward a, never overflowing); T{} when empty.
template <class T>
T median(std::vector<T> values) {
  static_assert(std::is_arithmetic_v<T>, "median of numbers");
  if (values.empty()) return T{};
  std::sort(values.begin(), values.end());
  const size_t m = values.size() / 2;
  if (values.size() % 2 == 1) return values[m];
  if constexpr (std::is_integral_v<T>) return values[m - 1] + (values[m] - values[m - 1]) / 2;
  return (values[m - 1] + values[m]) / 2;
}

}  // namespace pipewright::pipeline
