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
  k.fill = &fill;
  k.copy_strided = &copy_strided;
  k.cast = &cast;
  k.binary = &binary;
  k.binary_scalar = &binary_scalar;
  k.unary = &unary;
  k.relu_backward = &relu_backward;
  k.axpy = &axpy;
  k.reduce = &reduce;
  k.argmax = &argmax;
  k.gemm = &gemm;
  k.softmax = &softmax;
  k.softmax_backward = &softmax_backward;
  k.cross_entropy = &cross_entropy;
  k.cross_entropy_backward = &cross_entropy_backward;
  k.batch_norm_train = &batch_norm_train;
  k.batch_norm_eval = &batch_norm_eval;
  k.batch_norm_backward = &batch_norm_backward;
  k.philox_uniform = &philox_uniform;
  k.philox_normal = &philox_normal;
  k.dropout = &dropout;
  k.index_select = &index_select;
  k.sgd_step = &sgd_step;
  k.adam_step = &adam_step;
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
