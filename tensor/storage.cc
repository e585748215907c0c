#include "tensor/storage.h"

namespace pipewright {

Storage::Storage(size_t bytes, Device device, void* stream)
    : allocator_(&allocator_for(device)),
      data_(allocator_->allocate(bytes, stream)),
      bytes_(bytes) {}

Storage::~Storage() { allocator_->deallocate(data_, bytes_); }

}  // namespace pipewright
