// Dataset: a supervised dataset held in memory as two tensors, and Batch, a group of its
// samples. Like torch.utils.data.TensorDataset with exactly (inputs, targets).
//
//   inputs  [N, ...]  any dtype, e.g. float32 [N, 784] images
//   targets [N]       any dtype, e.g. int64 class indices
//
// Sample i is (inputs[i], targets[i]). Both tensors must be on one device; batches are taken
// on that device.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace pipewright::data {

/// A group of B samples: inputs [B, ...], targets [B].
struct Batch {
  Tensor inputs;
  Tensor targets;

  /// B, the number of samples (inputs.size(0)).
  int64_t size() const { return inputs.size(0); }
};

class Dataset {
 public:
  /// Takes inputs [N, ...] and targets [N] (no copy; the tensors are shared).
  /// Throws std::invalid_argument when either is undefined, inputs has rank 0, targets is not
  /// rank 1, the sample counts differ, or the devices differ (naming shapes and devices).
  Dataset(Tensor inputs, Tensor targets);

  /// N, the number of samples.
  int64_t size() const { return inputs_.size(0); }

  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

  /// Samples [start, end) as views (no copy): inputs [end-start, ...], targets [end-start].
  /// Throws std::out_of_range unless 0 <= start <= end <= size().
  Batch slice(int64_t start, int64_t end) const;

  /// The samples named by `indices` (int64 [K], any order, repeats allowed), gathered into new
  /// contiguous tensors with ops::index_select: inputs [K, ...], targets [K]. `indices` may be
  /// on any device (it is moved to the dataset's).
  /// Throws std::invalid_argument when indices is not an int64 rank-1 tensor, and
  /// std::out_of_range naming an index outside [0, size()).
  Batch gather(const Tensor& indices) const;

 private:
  Tensor inputs_;
  Tensor targets_;
};

}  // namespace pipewright::data
