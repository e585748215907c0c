#include "distributed/mpi_tensor.h"

namespace pipewright::distributed {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt64:
      return MPI_INT64_T;
  }
  return MPI_BYTE;
}

Tensor on_host(const Tensor& t) {
  return t.device().is_cpu() ? t.contiguous() : t.contiguous().to(Device::cpu(0));
}

}  // namespace pipewright::distributed
