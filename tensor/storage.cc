#include "tensor/storage.h"

namespace pipewright {

Storage::Storage(size_t bytes, Device device, void* stream)
    : allocator_(&allocator_for(device)),
      data_(allocator_->allocate(bytes, stream)),
      bytes_(bytes) {}

Storage::Storage(void* data, size_t bytes, Device device)
    : allocator_(&allocator_for(device)), data_(data), bytes_(bytes), owned_(false) {}

Storage::~Storage() {
  if (owned_) allocator_->deallocate(data_, bytes_);
}

}  // namespace pipewright
