#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {

namespace {
Kernels make_table() {
  Kernels k;
  // One assignment per listed kernel (Note [One kernel list] in tensor/kernels.h).
#define PIPEWRIGHT_SET_KERNEL(name, params) k.name = &name;
  PIPEWRIGHT_KERNELS(PIPEWRIGHT_SET_KERNEL)
  PIPEWRIGHT_CPU_ONLY_KERNELS(PIPEWRIGHT_SET_KERNEL)
#undef PIPEWRIGHT_SET_KERNEL
  return k;
}
}  // namespace

const Kernels& kernel_table() {
  static const Kernels table = make_table();
  return table;
}

}  // namespace pipewright::cpu
