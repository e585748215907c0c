#include "cuda_kernels/launch_limits.h"

#include <atomic>
#include <stdexcept>
#include <string>

namespace pipewright::cuda {
namespace {

std::atomic<int64_t> g_max_grid{LaunchLimits{}.max_grid};
std::atomic<int> g_max_row_block{LaunchLimits{}.max_row_block};

}  // namespace

LaunchLimits launch_limits() {
  return {g_max_grid.load(std::memory_order_relaxed),
          g_max_row_block.load(std::memory_order_relaxed)};
}

void set_launch_limits(LaunchLimits limits) {
  const int b = limits.max_row_block;
  if (limits.max_grid < 1 || b < 32 || b > 1024 || (b & (b - 1)) != 0) {
    throw std::invalid_argument("set_launch_limits: max_grid " + std::to_string(limits.max_grid) +
                                " must be >= 1 and max_row_block " + std::to_string(b) +
                                " a power of two in [32, 1024]");
  }
  g_max_grid.store(limits.max_grid, std::memory_order_relaxed);
  g_max_row_block.store(b, std::memory_order_relaxed);
}

}  // namespace pipewright::cuda
