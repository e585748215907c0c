// Storage: one allocation on one device, shared (std::shared_ptr) by every tensor that views it.
// Returned to its allocator when the last view goes away; or memory the caller owns
// (Tensor::from_blob), which it neither counts nor frees.
#pragma once

#include <cstddef>
#include <memory>

#include "tensor/allocator.h"

namespace pipewright {

class Storage {
 public:
  /// Allocates `bytes` on `device` (see Allocator::allocate for errors).
  Storage(size_t bytes, Device device, void* stream = nullptr);
  /// Wraps `bytes` at `data` on `device`, owned by the caller (not counted, never freed).
  /// Throws std::invalid_argument for a device that has no allocator (allocator_for).
  Storage(void* data, size_t bytes, Device device);
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
  bool owned_ = true;  // false: the caller's memory (from_blob)
};

}  // namespace pipewright
