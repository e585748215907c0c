// Automatic balance (see balance.h).
#include "pipeline/balance.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "autograd/engine.h"
#include "nn/skip.h"
#include "pipeline/min_max_cut.h"
#include "pipeline/partition.h"
#include "pipeline/layer_timing.h"
#include "pipeline/profile_state.h"
#include "tensor/allocator.h"
#include "tensor/stream.h"

namespace pipewright::pipeline {

namespace {

void check_partitions(int partitions, size_t layers) {
  if (partitions <= 0) {
    throw std::invalid_argument("number of partitions must be positive (partitions: " +
                                std::to_string(partitions) + ")");
  }
  if (static_cast<size_t>(partitions) > layers) {
    throw std::invalid_argument("more partitions than layers (partitions: " +
                                std::to_string(partitions) +
                                ", layers: " + std::to_string(layers) + ")");
  }
}

}  // namespace

// ---- the block partition ----

// Note [Block partition]
// For n costs c_0..c_{n-1} and p blocks, let S(i, j) = c_i + ... + c_{j-1} (prefix sums, exact
// in int64) and best[k][i] = the smallest possible largest block when c_i..c_{n-1} is cut
// into k non-empty blocks (defined for n - i >= k):
//   best[1][i] = S(i, n)
//   best[k][i] = min over j in (i, n-k+1] of max(S(i, j), best[k-1][j])
// (the first block is c_i..c_{j-1}; the rest is an optimal cut of the suffix). best[p][0] is
// the optimum. Nothing assumes costs >= 0, so zero and negative costs are exact too (a binary
// search over the answer with a greedy feasibility test would need non-negative costs).
// Reconstruction from the front, with T = best[p][0], takes for each block the SHORTEST one
// with S(i, j) <= T and best[k-1][j] <= T (the rest can still be cut with no block above T).
// Every choice keeps an optimal completion, and the shortest at each position gives the
// lexicographically smallest balance among all optimal ones. (Comparing with the suffix's own
// optimum best[k][i] instead of T would be wrong: a suffix may be cut better than it needs.)
// Cost: p·n²/2 max/min steps, p·(n+1) int64 of memory. The recurrence is min_max_cut
// (min_max_cut.h), which the planner's cuts (planner/cuts.h) use too.
std::vector<int> block_partition(const std::vector<int64_t>& costs, int partitions) {
  const size_t n = costs.size();
  check_partitions(partitions, n);
  std::vector<int64_t> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  return min_max_cut<int64_t>(static_cast<int>(n), partitions,
                              [&prefix](int i, int j, int) -> std::optional<int64_t> {
                                return prefix[static_cast<size_t>(j)] -
                                       prefix[static_cast<size_t>(i)];
                              });
}

int64_t max_block_cost(const std::vector<int64_t>& costs, const std::vector<int>& balance) {
  verify_balance_sum(balance, costs.size(), "costs");
  int64_t worst = std::numeric_limits<int64_t>::min();
  size_t i = 0;
  for (int b : balance) {
    int64_t block = 0;
    for (int k = 0; k < b; ++k) block += costs[i++];
    worst = std::max(worst, block);
  }
  return worst;
}

std::vector<int> balance_by_parameters(int partitions, const nn::Sequential& module) {
  check_partitions(partitions, module.size());
  std::vector<int64_t> layer_cost;  // parameter count + 1, per layer
  std::vector<int64_t> block_cost;  // Σ layer_cost over each block
  std::vector<int> block_layers;    // layers per block
  bool block_has_matrix = false;
  for (size_t i = 0; i < module.size(); ++i) {
    int64_t count = 0;
    bool matrix = false;
    for (const Tensor& p : module[i].parameters()) {
      count += p.numel();
      matrix = matrix || p.dim() >= 2;
    }
    layer_cost.push_back(count + 1);
    // A weight layer opens a new block, unless the open one has none yet (leading layers
    // without a matrix go with the first weight layer); so does a layer that stashes a skip
    // without popping one: it begins what the skip goes around (a residual block).
    const auto* skippable = dynamic_cast<const nn::Skippable*>(&module[i]);
    const bool opens_skip = skippable != nullptr && !skippable->stash_names().empty() &&
                            skippable->pop_names().empty();
    if (block_cost.empty() || (matrix && block_has_matrix) || opens_skip) {
      block_cost.push_back(0);
      block_layers.push_back(0);
      block_has_matrix = false;
    }
    block_cost.back() += count + 1;
    block_layers.back() += 1;
    block_has_matrix = block_has_matrix || matrix;
  }
  if (block_cost.size() < static_cast<size_t>(partitions)) {
    return block_partition(layer_cost, partitions);
  }
  std::vector<int> balance;
  size_t block = 0;
  for (int blocks : block_partition(block_cost, partitions)) {
    int layers = 0;
    for (int k = 0; k < blocks; ++k) layers += block_layers[block++];
    balance.push_back(layers);
  }
  return balance;
}

// ---- profiling ----

namespace {

void check_profile_inputs(const char* who, const nn::Sequential& module,
                          const nn::Tensors& sample, Device device) {
  if (module.size() == 0) {
    throw std::invalid_argument(std::string(who) + ": the module has no layers (empty Sequential)");
  }
  if (sample.empty()) throw std::invalid_argument(std::string(who) + ": the sample is empty");
  for (size_t i = 0; i < sample.size(); ++i) {
    if (!sample[i].defined()) {
      throw std::invalid_argument(std::string(who) + ": sample[" + std::to_string(i) +
                                  "] is undefined");
    }
    if (sample[i].device() != device) {
      throw std::invalid_argument(std::string(who) + ": sample[" + std::to_string(i) +
                                  "] is on " + sample[i].device().str() +
                                  " but the profile runs on " + device.str());
    }
  }
  for (const auto& [name, t] : module.state_dict()) {
    if (t.device() != device) {
      throw std::invalid_argument(std::string(who) + ": module tensor '" + name + "' is on " +
                                  t.device().str() + " but the profile runs on " + device.str() +
                                  " (move the module there first)");
    }
  }
}

/// The cheap checks of a balance_by_* call, before anything runs: partitions <= 0, an empty
/// module, more partitions than layers.
void check_request(const char* who, int partitions, const nn::Sequential& module) {
  if (partitions > 0 && module.size() == 0) {
    throw std::invalid_argument(std::string(who) +
                                ": the module has no layers (empty Sequential)");
  }
  check_partitions(partitions, module.size());
}

}  // namespace

std::vector<int64_t> profile_times(nn::Sequential& module, const nn::Tensors& sample,
                                   const BalanceByTimeOptions& options) {
  check_profile_inputs("profile_times", module, sample, options.device);
  if (options.warmup < 0) {
    throw std::invalid_argument("profile_times: warmup must be >= 0 (warmup: " +
                                std::to_string(options.warmup) + ")");
  }
  if (options.repetitions <= 0) {
    throw std::invalid_argument("profile_times: repetitions must be positive (repetitions: " +
                                std::to_string(options.repetitions) + ")");
  }
  ProfileStateGuard state(module);
  std::vector<ProfiledLayer> layers;
  std::vector<nn::Tensors> parameters(module.size());
  for (size_t i = 0; i < module.size(); ++i) {
    layers.push_back([&module, i](const nn::Tensors& x) { return module[i].forward(x); });
    for (const Tensor& p : module[i].parameters()) {
      if (p.requires_grad()) parameters[i].push_back(p);
    }
  }
  const std::vector<LayerTimes> times = time_layers(
      layers, parameters, [&] { return detach_like(sample); }, options.device,
      {.warmup = options.warmup, .repetitions = options.repetitions, .split_backward = false});
  std::vector<int64_t> costs;
  for (const LayerTimes& t : times) costs.push_back(std::llround((t.forward + t.backward) * 1e3));
  return costs;
}

std::vector<int> balance_by_time(int partitions, nn::Sequential& module,
                                 const nn::Tensors& sample, const BalanceByTimeOptions& options) {
  check_request("balance_by_time", partitions, module);
  return block_partition(profile_times(module, sample, options), partitions);
}

std::vector<int> balance_by_time(int partitions, nn::Sequential& module, const Tensor& sample,
                                 const BalanceByTimeOptions& options) {
  return balance_by_time(partitions, module, nn::Tensors{sample}, options);
}

std::vector<LayerSize> profile_sizes(nn::Sequential& module, const nn::Tensors& sample,
                                     const BalanceBySizeOptions& options) {
  check_profile_inputs("profile_sizes", module, sample, options.device);
  if (options.chunks <= 0) {
    throw std::invalid_argument("profile_sizes: number of chunks must be positive integer "
                                "(chunks: " + std::to_string(options.chunks) + ")");
  }
  if (!std::isfinite(options.param_scale) || options.param_scale < 0) {
    throw std::invalid_argument("profile_sizes: param_scale must be finite and >= 0 "
                                "(param_scale: " + std::to_string(options.param_scale) + ")");
  }
  nn::Tensors micro;
  for (size_t i = 0; i < sample.size(); ++i) {
    if (sample[i].dim() == 0) {
      throw std::invalid_argument("profile_sizes: sample[" + std::to_string(i) +
                                  "] is a scalar (shape []); a sample has a batch dimension");
    }
    micro.push_back(sample[i].chunk(options.chunks)[0]);  // a view: allocates nothing
  }
  ProfileStateGuard state(module);
  Allocator& allocator = allocator_for(options.device);
  const size_t n = module.size();
  std::vector<LayerSize> sizes(n);

  nn::Tensors x = detach_like(micro);
  for (size_t i = 0; i < n; ++i) {
    // x is held here, so only what layer i allocates and keeps moves the counter; the previous
    // layer's graph was released at the end of the last iteration.
    const int64_t before = allocator.allocated();
    allocator.reset_peak();
    nn::Tensors y = module[i].forward(x);
    LayerSize& s = sizes[i];
    s.activation_bytes = allocator.allocated() - before;
    s.peak_bytes = allocator.peak() - before;
    for (const Tensor& p : module[i].parameters()) {
      s.parameter_bytes += static_cast<int64_t>(p.nbytes());
    }
    s.cost = s.activation_bytes +
             std::llround(options.param_scale * static_cast<double>(s.parameter_bytes));
    x = detach_like(y);
    y.clear();  // frees layer i's graph (its saved tensors); its outputs live on in x
  }
  return sizes;
}

std::vector<int> balance_by_size(int partitions, nn::Sequential& module,
                                 const nn::Tensors& sample, const BalanceBySizeOptions& options) {
  check_request("balance_by_size", partitions, module);
  std::vector<int64_t> costs;
  for (const LayerSize& s : profile_sizes(module, sample, options)) costs.push_back(s.cost);
  return block_partition(costs, partitions);
}

std::vector<int> balance_by_size(int partitions, nn::Sequential& module, const Tensor& sample,
                                 const BalanceBySizeOptions& options) {
  return balance_by_size(partitions, module, nn::Tensors{sample}, options);
}

}  // namespace pipewright::pipeline
