// The caps on launch sizes that cuda_kernels/launch.cuh applies, settable so tests can make
// small inputs take the paths large ones take on a GPU.
//
//   max_grid       blocks per launch (grid_for, row_grid): beyond it grid-stride loops and
//                  one-block-per-row kernels loop over the rest. Default 65,536.
//   max_row_block  threads per block of a row kernel (row_block): a power of two from 32.
//                  Default 512.
//
// With the defaults, exercising a row loop takes more than 65,536 rows; a test sets
// {.max_grid = 3, .max_row_block = 64} and 10 rows do (tests/cuda use ScopedLaunchLimits).
#pragma once

#include <cstdint>

namespace pipewright::cuda {

struct LaunchLimits {
  int64_t max_grid = 65536;
  int max_row_block = 512;
};

/// The limits in force (process-wide; read at each launch).
LaunchLimits launch_limits();

/// Replaces them. Throws std::invalid_argument naming the value unless max_grid >= 1 and
/// max_row_block is a power of two in [32, 1024]. Set it while no kernel is being launched
/// (tests do it between cases).
void set_launch_limits(LaunchLimits limits);

/// Sets limits for a scope and restores the previous ones.
class ScopedLaunchLimits {
 public:
  explicit ScopedLaunchLimits(LaunchLimits limits) : previous_(launch_limits()) {
    set_launch_limits(limits);
  }
  ~ScopedLaunchLimits() { set_launch_limits(previous_); }
  ScopedLaunchLimits(const ScopedLaunchLimits&) = delete;
  ScopedLaunchLimits& operator=(const ScopedLaunchLimits&) = delete;

 private:
  LaunchLimits previous_;
};

}  // namespace pipewright::cuda
