#include "pipeline/planner/cuts.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "pipeline/min_max_cut.h"

namespace pipewright::pipeline {

bool stage_allowed(const std::vector<SkipSpan>& skips, int first, int last) {
  return std::none_of(skips.begin(), skips.end(), [&](const SkipSpan& skip) {
    return skip.stash < first && skip.pop >= last;
  });
}

// Note [Block partition]'s recurrence (balance.cc, min_max_cut.h), a block [i, j) allowed only
// when stage_allowed.
std::vector<int> min_max_partition(int n, int parts, const std::vector<SkipSpan>& skips,
                                   const std::function<double(int, int, int)>& cost) {
  return min_max_cut<double>(n, parts, [&](int i, int j, int index) -> std::optional<double> {
    if (!stage_allowed(skips, i, j)) return std::nullopt;
    return cost(i, j, index);
  });
}

std::vector<int> constrained_partition(const std::vector<double>& costs, int parts,
                                       const std::vector<SkipSpan>& skips,
                                       const std::function<bool(int, int, int)>& fits) {
  const int n = static_cast<int>(costs.size());
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);
  for (int i = 0; i < n; ++i) {
    prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + costs[static_cast<size_t>(i)];
  }
  return min_max_partition(n, parts, skips, [&](int i, int j, int index) {
    if (fits && !fits(i, j, index)) return std::numeric_limits<double>::infinity();
    return prefix[static_cast<size_t>(j)] - prefix[static_cast<size_t>(i)];
  });
}

}  // namespace pipewright::pipeline
