#include "pipeline/planner/cuts.h"

#include <algorithm>
#include <limits>

#include "pipeline/skip_layout.h"

namespace pipewright::pipeline {

std::vector<SkipSpan> skip_spans(const nn::Sequential& model) {
  std::vector<SkipSpan> spans;
  if (model.size() == 0) return spans;
  const SkipLayout layout(model, {static_cast<int>(model.size())});
  for (const SkipRoute& route : layout.routes()) {
    spans.push_back({static_cast<int>(route.stash_child), static_cast<int>(route.pop_child)});
  }
  return spans;
}

bool stage_allowed(const std::vector<SkipSpan>& skips, int first, int last) {
  return std::none_of(skips.begin(), skips.end(), [&](const SkipSpan& skip) {
    return skip.stash < first && skip.pop >= last;
  });
}

// The recurrence of Note [Block partition] (balance.cc) over suffixes, where a block
// [i, j) exists only when stage_allowed, and costs cost(i, j, its index).
std::vector<int> min_max_partition(int n, int parts, const std::vector<SkipSpan>& skips,
                                   const std::function<double(int, int, int)>& cost) {
  if (parts < 1 || parts > n) return {};
  constexpr double kNone = std::numeric_limits<double>::infinity();
  auto block = [&](int i, int j, int index) {
    return stage_allowed(skips, i, j) ? cost(i, j, index) : kNone;
  };
  // best[k][i]: the smallest largest block cost when [i, n) is cut into k blocks, the first
  // of which is block number parts - k.
  std::vector<std::vector<double>> best(static_cast<size_t>(parts) + 1,
                                        std::vector<double>(static_cast<size_t>(n) + 1, kNone));
  for (int i = 0; i < n; ++i) best[1][static_cast<size_t>(i)] = block(i, n, parts - 1);
  for (int k = 2; k <= parts; ++k) {
    for (int i = 0; i + k <= n; ++i) {
      double b = kNone;
      for (int j = i + 1; j + (k - 1) <= n; ++j) {
        const double rest = best[static_cast<size_t>(k) - 1][static_cast<size_t>(j)];
        if (rest == kNone) continue;
        b = std::min(b, std::max(block(i, j, parts - k), rest));
      }
      best[static_cast<size_t>(k)][static_cast<size_t>(i)] = b;
    }
  }
  const double optimum = best[static_cast<size_t>(parts)][0];
  if (optimum == kNone) return {};
  std::vector<int> balance;
  int i = 0;
  for (int k = parts; k > 1; --k) {
    int j = i + 1;
    while (!(block(i, j, parts - k) <= optimum &&
             best[static_cast<size_t>(k) - 1][static_cast<size_t>(j)] <= optimum)) {
      ++j;
    }
    balance.push_back(j - i);
    i = j;
  }
  balance.push_back(n - i);
  return balance;
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
