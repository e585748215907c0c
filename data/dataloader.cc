#include "data/dataloader.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace pipewright::data {

DataLoader::DataLoader(Dataset dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options), generator_(options.seed) {
  if (options_.batch_size < 1) {
    throw std::invalid_argument("DataLoader: batch_size must be >= 1, got " +
                                std::to_string(options_.batch_size));
  }
}

int64_t DataLoader::num_batches() const {
  const int64_t n = dataset_.size();
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void DataLoader::start_epoch() {
  if (options_.shuffle) order_ = generator_.randperm(dataset_.size(), dataset_.inputs().device());
  next_batch_ = 0;
  in_epoch_ = true;
}

std::optional<Batch> DataLoader::next() {
  if (!in_epoch_) start_epoch();
  if (next_batch_ >= num_batches()) {
    in_epoch_ = false;  // the call after this one starts the next epoch
    return std::nullopt;
  }
  return make_batch(next_batch_++);
}

DataLoader::Iterator DataLoader::begin() {
  start_epoch();
  return Iterator(this, next());
}

void DataLoader::set_generator_state(uint64_t seed, uint64_t offset) {
  generator_.set_state(seed, offset);
  in_epoch_ = false;
}

// Batch `index` covers positions [index * B, min((index + 1) * B, N)) of the epoch's order.
Batch DataLoader::make_batch(int64_t index) const {
  const int64_t start = index * options_.batch_size;
  const int64_t end = std::min(start + options_.batch_size, dataset_.size());
  if (!options_.shuffle) return dataset_.slice(start, end);
  return dataset_.gather(order_.slice(start, end));
}

}  // namespace pipewright::data
