// The median the planner's measurements take (profile, runtime overhead, trials).
#pragma once

#include <algorithm>
#include <vector>

namespace pipewright::pipeline {

/// The middle value of `values` (the mean of the two middle ones for an even count); 0 when
/// empty.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t m = values.size() / 2;
  return values.size() % 2 == 1 ? values[m] : (values[m - 1] + values[m]) / 2;
}

}  // namespace pipewright::pipeline
