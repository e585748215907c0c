// Where the planner may cut a model, and the block partitions it tries there.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "nn/sequential.h"

namespace pipewright::pipeline {

/// allowed[c] for c in [0, layers]: whether a stage may end before layer c (0 and layers
/// always). A cut inside a skip connection (between the layer that stashes and the one that
/// pops) is not allowed: the planner keeps skips inside stages, as balance_by_parameters
/// keeps residual blocks whole.
std::vector<char> allowed_cuts(const nn::Sequential& model);

/// Cuts costs[0..n) into `parts` contiguous non-empty blocks ending only at allowed cuts and
/// each passing fits(first, last, block index), minimising the largest block sum; among
/// optimal cuts the lexicographically smallest balance (as block_partition in balance.h,
/// with the extra rules). Empty when no cut satisfies them. O(parts · n²).
std::vector<int> constrained_partition(const std::vector<double>& costs, int parts,
                                       const std::vector<char>& allowed,
                                       const std::function<bool(int, int, int)>& fits = {});

/// Cuts [0, n) into `parts` contiguous non-empty blocks ending only at allowed cuts,
/// minimising the largest cost(first, last, block index) for any cost (not only sums: a
/// stage's estimated memory, whose weight depends on the block's index); among optimal cuts
/// the lexicographically smallest balance. Empty when no cut exists. O(parts · n²) calls of
/// cost.
std::vector<int> min_max_partition(int n, int parts, const std::vector<char>& allowed,
                                   const std::function<double(int, int, int)>& cost);

}  // namespace pipewright::pipeline
