// The min-max cut: n costs in a row cut into `parts` contiguous non-empty blocks so that the
// largest block cost is least. balance.h's block_partition (torchgpipe's, exact in int64) and
// the planner's cuts (cuts.h: with skips, a memory fit, any per-block cost) are this one
// recurrence, Note [Block partition] (balance.cc).
#pragma once

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

namespace pipewright::pipeline {

/// Cuts [0, n) into `parts` blocks minimising the largest cost(first, last, block index);
/// cost returns std::nullopt for a block that may not exist. Among optimal cuts, the
/// lexicographically smallest balance (each block the shortest that still allows an optimal
/// rest). Empty when no cut exists (parts < 1, parts > n, or every cut has a refused block).
/// Cost is exact for integers (no rounding); negative costs are fine. O(parts · n²) calls.
template <class Cost>
std::vector<int> min_max_cut(int n, int parts,
                             const std::function<std::optional<Cost>(int, int, int)>& cost) {
  if (parts < 1 || parts > n) return {};
  // kNone marks "no cut": a refused block, or a suffix too short for its blocks.
  constexpr Cost kNone = std::numeric_limits<Cost>::has_infinity
                             ? std::numeric_limits<Cost>::infinity()
                             : std::numeric_limits<Cost>::max();
  auto block = [&](int i, int j, int index) { return cost(i, j, index).value_or(kNone); };
  // best[k][i]: the least largest block when [i, n) is cut into k blocks, the first of which
  // is block number parts - k.
  const size_t rows = static_cast<size_t>(parts) + 1, cols = static_cast<size_t>(n) + 1;
  std::vector<std::vector<Cost>> best(rows, std::vector<Cost>(cols, kNone));
  for (int i = 0; i < n; ++i) best[1][static_cast<size_t>(i)] = block(i, n, parts - 1);
  for (int k = 2; k <= parts; ++k) {
    for (int i = 0; i + k <= n; ++i) {
      Cost b = kNone;
      for (int j = i + 1; j + (k - 1) <= n; ++j) {
        const Cost rest = best[static_cast<size_t>(k) - 1][static_cast<size_t>(j)];
        if (rest == kNone) continue;
        b = std::min(b, std::max(block(i, j, parts - k), rest));
      }
      best[static_cast<size_t>(k)][static_cast<size_t>(i)] = b;
    }
  }
  const Cost optimum = best[static_cast<size_t>(parts)][0];
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

}  // namespace pipewright::pipeline
