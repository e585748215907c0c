// DataLoader: batch counts, epoch coverage, seeded shuffling, generator state round-trips.
#include "data/dataloader.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <vector>

#include "tensor/allocator.h"
#include "tensor/tensor.h"

namespace pipewright::data {
namespace {

using Catch::Contains;

// n samples: inputs [n, 2] with row i = (i, -i), targets [n] = i, so a batch's targets name
// its samples and the inputs can be checked against them.
Dataset numbered(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.insert(x.end(), {static_cast<float>(i), -static_cast<float>(i)});
    y.push_back(i);
  }
  return Dataset(Tensor::from_vector(x, {n, 2}), Tensor::from_vector(y));
}

// The sample ids of one epoch in visiting order, checking each batch's inputs match its targets.
std::vector<int64_t> epoch_order(DataLoader& loader, std::vector<int64_t>* batch_sizes = nullptr) {
  std::vector<int64_t> order;
  for (const Batch& batch : loader) {
    REQUIRE(batch.inputs.shape() == Shape{batch.size(), 2});
    REQUIRE(batch.targets.shape() == Shape{batch.size()});
    const std::vector<float> x = batch.inputs.to_vector<float>();
    const std::vector<int64_t> y = batch.targets.to_vector<int64_t>();
    for (size_t k = 0; k < y.size(); ++k) {
      REQUIRE(x[2 * k] == static_cast<float>(y[k]));
      REQUIRE(x[2 * k + 1] == -static_cast<float>(y[k]));
    }
    order.insert(order.end(), y.begin(), y.end());
    if (batch_sizes != nullptr) batch_sizes->push_back(batch.size());
  }
  return order;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST_CASE("DataLoader batch counts with and without drop_last") {
  struct Case { int64_t n, batch; bool drop_last; int64_t batches; std::vector<int64_t> sizes; };
  const Case c = GENERATE(values<Case>({
      {10, 3, false, 4, {3, 3, 3, 1}},
      {10, 3, true, 3, {3, 3, 3}},
      {10, 5, false, 2, {5, 5}},
      {10, 5, true, 2, {5, 5}},
      {10, 10, false, 1, {10}},
      {10, 11, false, 1, {10}},
      {10, 11, true, 0, {}},
      {1, 1, false, 1, {1}},
  }));
  const bool shuffle = GENERATE(false, true);
  CAPTURE(c.n, c.batch, c.drop_last, shuffle);
  DataLoader loader(numbered(c.n), {.batch_size = c.batch, .shuffle = shuffle,
                                    .drop_last = c.drop_last, .seed = 7});
  REQUIRE(loader.num_batches() == c.batches);
  std::vector<int64_t> sizes;
  const std::vector<int64_t> order = epoch_order(loader, &sizes);
  REQUIRE(sizes == c.sizes);
  // No sample twice; without drop_last, every sample.
  std::vector<int64_t> seen = sorted(order);
  REQUIRE(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
  if (!c.drop_last) REQUIRE(seen == iota(c.n));
}

TEST_CASE("DataLoader without shuffle yields slices in order") {
  DataLoader loader(numbered(7), {.batch_size = 3});
  REQUIRE(epoch_order(loader) == iota(7));
  for (const Batch& batch : loader) {
    REQUIRE(batch.inputs.shares_storage(loader.dataset().inputs()));  // a view, no copy
  }
  REQUIRE(loader.generator().offset() == 0);  // never drew a number
}

TEST_CASE("DataLoader with shuffle sees every sample exactly once per epoch") {
  DataLoader loader(numbered(100), {.batch_size = 16, .shuffle = true, .seed = 1});
  for (int epoch = 0; epoch < 3; ++epoch) {
    const std::vector<int64_t> order = epoch_order(loader);
    REQUIRE(order.size() == 100);
    REQUIRE(sorted(order) == iota(100));
    REQUIRE(order != iota(100));  // shuffled (identity has probability 1/100!)
  }
}

TEST_CASE("DataLoader: same seed gives the same orders, epochs and seeds differ") {
  DataLoader a(numbered(50), {.batch_size = 8, .shuffle = true, .seed = 42});
  DataLoader b(numbered(50), {.batch_size = 8, .shuffle = true, .seed = 42});
  DataLoader c(numbered(50), {.batch_size = 8, .shuffle = true, .seed = 43});
  const std::vector<int64_t> a0 = epoch_order(a), a1 = epoch_order(a);
  const std::vector<int64_t> b0 = epoch_order(b), b1 = epoch_order(b);
  REQUIRE(a0 == b0);
  REQUIRE(a1 == b1);
  REQUIRE(a0 != a1);                 // the generator advanced between epochs
  REQUIRE(epoch_order(c) != a0);     // another seed, another order
}

TEST_CASE("DataLoader: a restored generator state reproduces the next epoch") {
  DataLoader loader(numbered(40), {.batch_size = 6, .shuffle = true, .seed = 3});
  epoch_order(loader);
  epoch_order(loader);
  // Checkpoint between epochs 1 and 2.
  const uint64_t seed = loader.generator().seed();
  const uint64_t offset = loader.generator().offset();
  REQUIRE(offset > 0);
  const std::vector<int64_t> next2 = epoch_order(loader), next3 = epoch_order(loader);

  DataLoader resumed(numbered(40), {.batch_size = 6, .shuffle = true, .seed = 999});
  resumed.set_generator_state(seed, offset);
  REQUIRE(epoch_order(resumed) == next2);
  REQUIRE(epoch_order(resumed) == next3);

  // Restoring mid-epoch abandons that epoch: the next batches come from the restored order.
  loader.set_generator_state(seed, offset);
  REQUIRE(loader.next().has_value());
  loader.set_generator_state(seed, offset);
  std::vector<int64_t> via_next;
  while (auto batch = loader.next()) {
    const std::vector<int64_t> y = batch->targets.to_vector<int64_t>();
    via_next.insert(via_next.end(), y.begin(), y.end());
  }
  REQUIRE(via_next == next2);
}

TEST_CASE("DataLoader::next runs one epoch, then std::nullopt, then the next epoch") {
  DataLoader loader(numbered(5), {.batch_size = 2});
  int batches = 0;
  while (auto batch = loader.next()) ++batches;
  REQUIRE(batches == 3);
  REQUIRE(loader.next().has_value());  // a new epoch started
  loader.start_epoch();                // abandon it and start over
  REQUIRE(loader.next()->targets.to_vector<int64_t>() == std::vector<int64_t>{0, 1});
}

TEST_CASE("DataLoader with shuffle keeps its permutation on the dataset's device") {
  // A pipeline's first stage usually runs on cpu:0; an epoch's order must not count there.
  const Device host = Device::cpu(6);
  const Dataset local = numbered(40);
  const Dataset on_host(local.inputs().to(host), local.targets().to(host));
  DataLoader loader(on_host, {.batch_size = 16, .shuffle = true, .seed = 1});
  const int64_t cpu0_before = allocator_for(Device::cpu(0)).allocated();
  const int64_t host_before = allocator_for(host).allocated();
  auto it = loader.begin();
  REQUIRE(allocator_for(Device::cpu(0)).allocated() == cpu0_before);
  // The permutation (int64 [40]) and the first gathered batch live on the host device.
  REQUIRE(allocator_for(host).allocated() >= host_before + 40 * 8);
  REQUIRE((*it).inputs.device() == host);
}

TEST_CASE("DataLoader rejects batch_size < 1, naming the value") {
  REQUIRE_THROWS_WITH(DataLoader(numbered(4), {.batch_size = 0}),
                      Contains("batch_size must be >= 1, got 0"));
  REQUIRE_THROWS_AS(DataLoader(numbered(4), {.batch_size = -3}), std::invalid_argument);
}

}  // namespace
}  // namespace pipewright::data
