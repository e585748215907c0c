// Tensors in MPI calls: the MPI datatype of a dtype, and the contiguous host copy a buffer is
// read from (MPI reads host memory; the NCCL path in gradient_buckets.cc stays on the GPU).
#pragma once

#include <mpi.h>

#include "tensor/tensor.h"

namespace pipewright::distributed {

/// MPI_FLOAT, MPI_DOUBLE or MPI_INT64_T for kFloat32, kFloat64, kInt64, what reductions run
/// on. Throws std::invalid_argument naming a 16-bit dtype (no MPI type reduces it).
MPI_Datatype mpi_type(DType dtype);

/// `t` itself when it is contiguous host memory, else a contiguous copy on cpu:0 (copied on
/// the calling thread's current stream for a GPU tensor).
Tensor on_host(const Tensor& t);

}  // namespace pipewright::distributed
