// Launch configuration checks: see launch.h.
#include "cudasim/launch.h"

namespace cudasim::detail {

std::string dims(dim3 d) {
  std::string s = "(";
  s += std::to_string(d.x);
  s += ',';
  s += std::to_string(d.y);
  s += ',';
  s += std::to_string(d.z);
  return s + ")";
}

std::string config_error(dim3 grid, dim3 block, size_t shared_bytes) {
  const unsigned long long threads =
      static_cast<unsigned long long>(block.x) * block.y * block.z;
  if (threads == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0) {
    return "a zero dimension in grid " + dims(grid) + " or block " + dims(block);
  }
  if (threads > kMaxThreadsPerBlock || block.x > kMaxThreadsPerBlock ||
      block.y > kMaxThreadsPerBlock || block.z > kMaxBlockDimZ) {
    return "block " + dims(block) + " has " + std::to_string(threads) +
           " threads; the limits are 1024 threads per block, x and y <= 1024, z <= 64";
  }
  if (grid.x > kMaxGridDimX || grid.y > kMaxGridDimYZ || grid.z > kMaxGridDimYZ) {
    return "grid " + dims(grid) + " exceeds the limits x <= 2^31-1, y and z <= 65535";
  }
  if (shared_bytes > kMaxDynamicSharedBytes) {
    return "dynamic shared memory of " + std::to_string(shared_bytes) +
           " bytes exceeds 48 KiB (more needs cudaFuncSetAttribute, which is not simulated)";
  }
  return "";
}

}  // namespace cudasim::detail
