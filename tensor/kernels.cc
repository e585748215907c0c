// The per-device-type kernel tables. CPU's table is installed on first use by a direct call
// (no static-initialisation-order dependence); other backends call register_kernels().
#include "tensor/kernels.h"

#include <array>
#include <atomic>

#include "tensor/cpu/kernel_table.h"

namespace pipewright {
namespace {

std::array<std::atomic<const Kernels*>, kNumDeviceTypes>& tables() {
  static std::array<std::atomic<const Kernels*>, kNumDeviceTypes> table{&cpu::kernel_table(),
                                                                        nullptr};
  return table;
}

}  // namespace

const Kernels& kernels_for(DeviceType type) {
  static const Kernels kEmpty;  // every entry null: get() names the missing op
  const Kernels* table = tables()[static_cast<int>(type)].load(std::memory_order_acquire);
  return table == nullptr ? kEmpty : *table;
}

void register_kernels(DeviceType type, const Kernels* table) {
  tables()[static_cast<int>(type)].store(table, std::memory_order_release);
}

}  // namespace pipewright
