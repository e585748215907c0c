// Storage: one allocation on one device, shared (std::shared_ptr) by every tensor that views it.
// Returned to its allocator when the last view goes away.
#pragma once

#include <cstddef>
#include <memory>

#include "tensor/allocator.h"

namespace pipewright {

class Storage {
 public:
  /// Allocates `bytes` on `device` (see Allocator::allocate for errors).
  Storage(size_t bytes, Device device, void* stream = nullptr);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return bytes_; }
  Device device() const { return allocator_->device(); }

 private:
  Allocator* allocator_;
  void* data_;
  size_t bytes_;
};

}  // namespace pipewright
