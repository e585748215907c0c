// DataLoader: cuts a Dataset into mini-batches, in order or shuffled, one epoch at a time.
//
// Semantics follow torch.utils.data.DataLoader(dataset, batch_size, shuffle, drop_last,
// generator) with a RandomSampler (https://pytorch.org/docs/stable/data.html):
//  - an epoch visits every sample exactly once, in batches of batch_size; the last batch is
//    smaller when batch_size does not divide N, or is dropped when drop_last is set;
//  - num_batches() is ceil(N / batch_size), or floor(N / batch_size) with drop_last (len());
//  - with shuffle, each epoch draws a new permutation from the loader's own Generator, so
//    epochs differ, and the same seed gives the same sequence of epochs.
//
// Reproducible shuffling: the loader's Generator (Philox, tensor/generator.h) has state
// (seed, offset). Each epoch start draws randperm(N), which advances the offset:
//
//   state (seed, o0) --epoch 0: randperm--> (seed, o1) --epoch 1: randperm--> (seed, o2) ...
//
// A checkpoint taken between epochs saves generator().seed() and generator().offset(); a new
// loader given them through set_generator_state() produces exactly the orders the old one
// would have produced next. (Resuming in the middle of an epoch is not supported: save at
// epoch boundaries.) Without shuffle the generator is never used.
//
// Batches are tensors on the dataset's device: views (slices, no copy) when not shuffled,
// new contiguous tensors built with ops::index_select when shuffled. The epoch's permutation
// lives there too, so a loader whose data sit on a device of their own allocates nothing on
// the pipeline's devices (whose peaks a plan predicts to the byte).
//
// Usage:
//   DataLoader loader(train, {.batch_size = 128, .shuffle = true, .seed = 42});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (const Batch& batch : loader) { /* batch.inputs [B, 784], batch.targets [B] */ }
//   // or: while (auto batch = loader.next()) { ... }   (one epoch, then std::nullopt)
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <utility>

#include "data/dataset.h"
#include "tensor/generator.h"

namespace pipewright::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;  // samples per batch, >= 1
  bool shuffle = false;    // a new random order each epoch
  bool drop_last = false;  // drop the last batch when it is smaller than batch_size
  uint64_t seed = 0;       // shuffle generator starts at state (seed, 0)
};

class DataLoader {
 public:
  /// Throws std::invalid_argument naming the value when options.batch_size < 1.
  DataLoader(Dataset dataset, DataLoaderOptions options);

  const Dataset& dataset() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }

  /// Batches per epoch: ceil(N / batch_size), or floor(N / batch_size) with drop_last.
  int64_t num_batches() const;

  // ---- one epoch at a time ----

  /// Starts a new epoch: with shuffle, draws the epoch's order from the generator (advancing
  /// its offset). An epoch in progress is abandoned.
  void start_epoch();

  /// The epoch's next batch; std::nullopt once the epoch is over, and the call after that
  /// starts the next epoch (so `while (auto b = loader.next())` runs exactly one epoch).
  /// Starts an epoch itself when none is in progress.
  std::optional<Batch> next();

  /// Input iterator over one epoch's batches. begin() starts a new epoch (like iter() on a
  /// torch DataLoader), so a range-for loop is one epoch.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = const Batch*;
    using reference = const Batch&;

    const Batch& operator*() const { return *batch_; }
    const Batch* operator->() const { return &*batch_; }
    Iterator& operator++() {
      batch_ = loader_->next();
      return *this;
    }
    /// Iterators are equal when both are past the end.
    bool operator==(const Iterator& other) const {
      return !batch_.has_value() && !other.batch_.has_value();
    }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader, std::optional<Batch> batch)
        : loader_(loader), batch_(std::move(batch)) {}
    DataLoader* loader_;
    std::optional<Batch> batch_;
  };
  Iterator begin();
  Iterator end() { return Iterator(this, std::nullopt); }

  // ---- shuffle generator state (for checkpoints) ----

  /// The shuffle generator; save generator().seed() and generator().offset() between epochs.
  const Generator& generator() const { return generator_; }
  /// Restores a saved (seed, offset); the next epoch draws its order from it. Ends an epoch
  /// in progress.
  void set_generator_state(uint64_t seed, uint64_t offset);

 private:
  Batch make_batch(int64_t index) const;

  Dataset dataset_;
  DataLoaderOptions options_;
  Generator generator_;
  Tensor order_;             // int64 [N], this epoch's permutation (shuffle only)
  bool in_epoch_ = false;    // an epoch is in progress
  int64_t next_batch_ = 0;   // index of the batch next() returns
};

}  // namespace pipewright::data
