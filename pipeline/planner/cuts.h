// Where the planner may cut a model, and the block partitions it tries there.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace pipewright::pipeline {

/// A skip connection of a Sequential: the top-level children that stash and pop it.
struct SkipSpan {
  int stash = 0;
  int pop = 0;
};

/// Note [Cuts inside a skip]
/// A stage may end between the layer that stashes a skip and the one that pops it: the Pipe
/// sends the tensor as a portal (Note [Portals], stage_skips.h) from the stashing stage's F
/// to the popping stage, and its gradient back from the popping stage's B. Between
/// neighbouring stages the portal travels exactly when the stage's own messages do (the
/// same F sends both, the same B sends both gradients), so the stage probe (stage_probe.h)
/// measures it as part of those messages and the memory replay times it right. A skip that
/// passes over a whole stage (stashed before it and popped after it) would reach its
/// receiver earlier than the replay assumes; the planner does not make such stages.
///
/// Whether layers [first, last) may be a stage: no skip is stashed before `first` and popped
/// at or after `last`.
bool stage_allowed(const std::vector<SkipSpan>& skips, int first, int last);

/// Cuts costs[0..n) into `parts` contiguous non-empty blocks, each a stage_allowed one and
/// passing fits(first, last, block index), minimising the largest block sum; among optimal
/// cuts the lexicographically smallest balance (as block_partition in balance.h, with the
/// extra rules). Empty when no cut satisfies them. O(parts · n²).
std::vector<int> constrained_partition(const std::vector<double>& costs, int parts,
                                       const std::vector<SkipSpan>& skips,
                                       const std::function<bool(int, int, int)>& fits = {});

/// Cuts [0, n) into `parts` contiguous non-empty stage_allowed blocks, minimising the largest
/// cost(first, last, block index) for any cost (not only sums: a stage's estimated memory,
/// whose weight depends on the block's index); among optimal cuts the lexicographically
/// smallest balance. Empty when no cut exists. O(parts · n²) calls of cost.
std::vector<int> min_max_partition(int n, int parts, const std::vector<SkipSpan>& skips,
                                   const std::function<double(int, int, int)>& cost);

}  // namespace pipewright::pipeline
