#include "distributed/mpi_tensor.h"

#include <stdexcept>
#include <string>

namespace pipewright::distributed {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kBFloat16:
    case DType::kFloat16:
      break;
  }
  // MPI has no 16-bit floating type to reduce: gradients are summed in float32 or float64.
  throw std::invalid_argument(std::string("MPI reductions take float32, float64 or int64 "
                                          "tensors, got ") + dtype_name(dtype));
}

Tensor on_host(const Tensor& t) {
  return t.device().is_cpu() ? t.contiguous() : t.contiguous().to(Device::cpu(0));
}

}  // namespace pipewright::distributed
