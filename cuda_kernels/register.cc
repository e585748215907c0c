// Start-up registration of the CUDA backend into tensor/'s three tables:
//   register_backend(kCUDA, ...)            streams, events, copies, device_count (backend.h)
//   register_allocator_factory(kCUDA, ...)  one CachingAllocator per GPU, made on first use
//   register_kernels(kCUDA, ...)            the kernel table below (kernel_table.h)
//
// It runs from a static initializer, so linking //cuda_kernels (an alwayslink library) is all
// a program does to get CUDA: Tensor::to(Device::cuda(0)) and every op then work on GPUs.
// Registration touches no GPU, so it is harmless on a machine without one: device_count()
// reports 0 and the first CUDA allocation throws CudaError.
#include "cuda_kernels/backend.h"
#include "cuda_kernels/caching_allocator.h"
#include "cuda_kernels/kernel_table.h"
#include "tensor/allocator.h"
#include "tensor/kernels.h"
#include "tensor/stream.h"

namespace pipewright::cuda {
namespace {

Kernels make_table() {
  Kernels k;
  // One assignment per listed kernel (Note [One kernel list] in tensor/kernels.h); the
  // CPU-only kernels stay null.
#define PIPEWRIGHT_SET_KERNEL(name, params) k.name = &name;
  PIPEWRIGHT_KERNELS(PIPEWRIGHT_SET_KERNEL)
#undef PIPEWRIGHT_SET_KERNEL
  return k;
}

Allocator* make_allocator(Device device) { return new CachingAllocator(device); }

struct Registrar {
  Registrar() {
    register_backend(DeviceType::kCUDA, &cuda_backend());
    register_allocator_factory(DeviceType::kCUDA, &make_allocator);
    register_kernels(DeviceType::kCUDA, &kernel_table());
  }
};

const Registrar registrar;

}  // namespace

const Kernels& kernel_table() {
  static const Kernels table = make_table();
  return table;
}

}  // namespace pipewright::cuda
