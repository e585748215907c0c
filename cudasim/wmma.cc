// The warp-collective half of cudasim's nvcuda::wmma (wmma.h): lanes publish their operands
// and meet at the executor's warp barrier.
#include "cudasim/wmma.h"

#include "cudasim/sim_internal.h"

namespace cudasim::wmma_detail {
namespace {

/// The publications of every lane of every warp of the running block. Blocks run one at a
/// time on an OS thread (their threads are fibers of it), so one table per OS thread.
thread_local Published t_slots[32][32];

}  // namespace

WarpLane warp_lane() {
  const uint3& t = thread_idx();
  const dim3& b = block_dim();
  const unsigned linear = t.x + b.x * (t.y + b.y * t.z);
  return {linear / 32, linear % 32};
}

void warp_barrier(std::source_location site) {
  (void)shuffle(ShuffleKind::kSyncWarp, 0xffffffffu, 0, 0, 32, site);
}

const Published* exchange(const Published& mine, std::source_location site) {
  const WarpLane w = warp_lane();
  t_slots[w.warp][w.lane] = mine;
  warp_barrier(site);
  return t_slots[w.warp];
}

void fault(const char* op, const std::string& what) {
  throw KernelFault(std::string("cudasim: wmma::") + op + ": " + what);
}

}  // namespace cudasim::wmma_detail
