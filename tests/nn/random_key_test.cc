// Keyed randomness (nn/random_key.h): masks as a function of (seed, step, layer, draw,
// sample), checked against the Philox stream directly.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "autograd/dropout.h"
#include "autograd/shape_ops.h"
#include "nn/dropout.h"
#include "nn/random_key.h"
#include "nn/sequential.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

using namespace pipewright;

namespace {

Tensor ones(const Shape& shape) { return Tensor::full(shape, 1.0); }

/// The mask Dropout(p) draws for `x` under `key` as child `layer` of a model (its first draw).
Tensor mask_of(const Tensor& x, double p, const nn::RandomKey& key, int64_t layer) {
  nn::RandomKeyGuard guard(key);
  nn::LayerScope scope(layer);
  return nn::Dropout(p).forward(x);
}

}  // namespace

TEST_CASE("a micro-batch draws its rows' slice of the whole batch's mask", "[random_key]") {
  const Tensor x = ones({8, 3, 5});
  const Tensor whole = mask_of(x, 0.5, {.seed = 1, .step = 2}, 3);
  const Tensor rows_0_2 = mask_of(x.slice(0, 2), 0.5, {.seed = 1, .step = 2}, 3);
  const Tensor rows_2_8 =
      mask_of(x.slice(2, 8), 0.5, {.seed = 1, .step = 2, .first_sample = 2}, 3);
  CHECK(ops::equal(autograd::cat({rows_0_2, rows_2_8}), whole));
  // Row r's elements start at stream value r * 15 of the keyed Philox stream: the mask equals
  // autograd::dropout's with the draw's (seed, offset).
  nn::RandomKeyGuard guard({.seed = 1, .step = 2, .first_sample = 2});
  nn::LayerScope scope(3);
  const nn::KeyedDraw draw = nn::next_keyed_draw(x.slice(2, 8));
  CHECK(draw.offset == 2 * 15);
  CHECK(ops::equal(autograd::dropout(x.slice(2, 8), 0.5, draw.seed, draw.offset), rows_2_8));
}

TEST_CASE("seed, step, layer and draw each give other masks", "[random_key]") {
  const Tensor x = ones({16, 32});
  const Tensor base = mask_of(x, 0.5, {.seed = 1, .step = 2}, 3);
  CHECK_FALSE(ops::equal(mask_of(x, 0.5, {.seed = 9, .step = 2}, 3), base));
  CHECK_FALSE(ops::equal(mask_of(x, 0.5, {.seed = 1, .step = 3}, 3), base));
  CHECK_FALSE(ops::equal(mask_of(x, 0.5, {.seed = 1, .step = 2}, 4), base));
  CHECK(ops::equal(mask_of(x, 0.5, {.seed = 1, .step = 2}, 3), base));
  // A second draw of the same layer is another mask; a new scope of the layer starts over.
  nn::RandomKeyGuard guard({.seed = 1, .step = 2});
  nn::Dropout dropout(0.5);
  {
    nn::LayerScope scope(3);
    CHECK(ops::equal(dropout.forward(x), base));
    CHECK_FALSE(ops::equal(dropout.forward(x), base));
  }
  nn::LayerScope again(3);
  CHECK(ops::equal(dropout.forward(x), base));
}

TEST_CASE("a Sequential keys its children by their index in the whole model; slices too",
          "[random_key]") {
  nn::Sequential model(nn::Dropout(0.5), nn::Dropout(0.5), nn::Dropout(0.5));
  const Tensor x = ones({4, 64});
  const nn::RandomKey key{.seed = 5, .step = 1};
  Tensor whole, sliced;
  {
    nn::RandomKeyGuard guard(key);
    whole = model.forward(x);
  }
  nn::Sequential head = model.slice(0, 1), tail = model.slice(1, 3);
  CHECK(tail.first_layer() == 1);
  CHECK(tail.slice(1, 2).first_layer() == 2);
  {
    nn::RandomKeyGuard guard(key);
    sliced = tail.forward(head.forward(x));
  }
  CHECK(ops::equal(sliced, whole));
  // The same masks as three separate layers 0, 1, 2 (a nested Sequential's draws are its
  // parent child's: layer 0, draws 0 and 1, would be another thing).
  Tensor manual = x;
  for (int64_t layer = 0; layer < 3; ++layer) manual = ops::mul(manual, mask_of(x, 0.5, key, layer));
  CHECK(ops::equal(manual, whole));
}

TEST_CASE("outside a key, Dropout draws from the current generator as before",
          "[random_key]") {
  const Tensor x = ones({4, 8});
  Generator g(7);
  GeneratorGuard guard(g);
  const Tensor y = nn::Dropout(0.5).forward(x);
  CHECK(g.offset() == 32);
  CHECK(ops::equal(y, autograd::dropout(x, 0.5, 7, 0)));
  CHECK_FALSE(nn::random_key_active());
  CHECK_THROWS_AS(nn::next_keyed_draw(x), std::logic_error);
  CHECK_THROWS_AS(nn::RandomKeyGuard({.first_sample = -1}), std::invalid_argument);
}
