// NcclGroup with NCCL (--config=cuda).
#include "distributed/nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

#include "distributed/mpi.h"

namespace pipewright::distributed {
namespace {

void nccl_check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) {
    throw std::runtime_error(std::string("NCCL: ") + what + ": " + ncclGetErrorString(rc));
  }
}

void cuda_check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(rc));
  }
}

}  // namespace

bool nccl_available() { return true; }

struct NcclGroup::Impl {
  ncclComm_t comm = nullptr;
  Device device;
};

NcclGroup::NcclGroup(MPI_Comm comm, Device device) : impl_(std::make_unique<Impl>()) {
  if (!device.is_cuda()) {
    throw std::invalid_argument("NcclGroup: " + device.str() + " is not a CUDA device");
  }
  impl_->device = device;
  int rank = 0, size = 0;
  check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  ncclUniqueId id;
  if (rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Request request;
  check(MPI_Ibcast(&id, sizeof id, MPI_BYTE, 0, comm, &request), "MPI_Ibcast (NCCL id)");
  wait(request, "broadcast of the NCCL unique id");
  cuda_check(cudaSetDevice(device.index), "cudaSetDevice");
  nccl_check(ncclCommInitRank(&impl_->comm, size, id, rank), "ncclCommInitRank");
}

NcclGroup::~NcclGroup() {
  if (impl_->comm != nullptr) ncclCommDestroy(impl_->comm);
}

void NcclGroup::all_reduce_sum(Tensor& flat, const Stream& stream) {
  if (flat.device() != impl_->device || !flat.is_contiguous() ||
      (flat.dtype() != DType::kFloat32 && flat.dtype() != DType::kFloat64)) {
    throw std::invalid_argument(
        "NcclGroup::all_reduce_sum: needs a contiguous float32/float64 "
        "tensor on " +
        impl_->device.str() + ", got " + dtype_name(flat.dtype()) + " on " + flat.device().str());
  }
  nccl_check(ncclAllReduce(flat.raw_data(), flat.raw_data(), static_cast<size_t>(flat.numel()),
                           flat.dtype() == DType::kFloat32 ? ncclFloat32 : ncclFloat64, ncclSum,
                           impl_->comm, static_cast<cudaStream_t>(stream.handle())),
             "ncclAllReduce");
}

}  // namespace pipewright::distributed
