// NcclGroup without NCCL (every build but --config=cuda): nccl_available() is false.
#include <stdexcept>

#include "distributed/nccl.h"

namespace pipewright::distributed {

bool nccl_available() { return false; }

struct NcclGroup::Impl {};

NcclGroup::NcclGroup(MPI_Comm, Device) {
  throw std::logic_error("NcclGroup: this build has no NCCL (build with --config=cuda)");
}

NcclGroup::~NcclGroup() = default;

void NcclGroup::all_reduce_sum(Tensor&, const Stream&) {
  throw std::logic_error("NcclGroup: this build has no NCCL (build with --config=cuda)");
}

}  // namespace pipewright::distributed
