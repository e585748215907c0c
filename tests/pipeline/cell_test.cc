// Cell: its error paths (recompute and backward out of order, wrong gradient counts, a stage
// that throws), each leaving the cell in a state the next call can rely on, and the
// gradients of a recorded and a checkpointed cell against closed forms.
#include "pipeline/cell.h"

#include <catch2/catch.hpp>

#include <stdexcept>
#include <vector>

#include "autograd/elementwise.h"
#include "tensor/generator.h"
#include "tensor/tensor.h"

using namespace pipewright;
using namespace pipewright::pipeline;

namespace {

const std::vector<float> kX = {1.0f, -2.0f, 0.5f};
const std::vector<float> kG = {0.25f, 1.0f, -3.0f};

Tensor x() { return Tensor::from_vector(kX); }
Tensor g() { return Tensor::from_vector(kG); }

// y = 3 x²: dy/dx · g = 6 x g.
nn::Tensors three_x_squared(const nn::Tensors& in) {
  return {autograd::mul(autograd::square(in[0]), 3.0)};
}

std::vector<float> six_x_g() {
  std::vector<float> out;
  for (size_t i = 0; i < kX.size(); ++i) out.push_back(6.0f * kX[i] * kG[i]);
  return out;
}

}  // namespace

TEST_CASE("a recorded cell: backward gives 6 x g, then holds no graph") {
  Generator rng(1);
  Cell cell;
  const nn::Tensors out = cell.forward(three_x_squared, {x()}, CellMode::kRecord, rng);
  REQUIRE(out.size() == 1);
  REQUIRE_FALSE(out[0].requires_grad());  // detached: safe to hand to another thread
  const nn::Tensors dx = cell.backward({g()});
  REQUIRE(dx[0].to_vector<float>() == six_x_g());
  REQUIRE_THROWS_WITH(cell.backward({g()}), "backward of a cell that holds no graph");
}

TEST_CASE("backward of a cell that never ran forward, or ran without grad") {
  Generator rng(1);
  Cell fresh;
  REQUIRE_THROWS_AS(fresh.backward({g()}), std::logic_error);
  Cell no_grad;
  no_grad.forward(three_x_squared, {x()}, CellMode::kNoGrad, rng);
  REQUIRE_THROWS_WITH(no_grad.backward({g()}), "backward of a cell that holds no graph");
  REQUIRE_THROWS_WITH(no_grad.recompute(three_x_squared, rng),
                      "recompute of a cell that was not checkpointed");
}

TEST_CASE("recompute and backward of a checkpointed cell, in and out of order") {
  Generator rng(1);
  Cell cell;
  cell.forward(three_x_squared, {x()}, CellMode::kCheckpoint, rng);
  REQUIRE_THROWS_WITH(cell.backward({g()}),
                      "backward of a checkpointed cell before its recompute");
  cell.recompute(three_x_squared, rng);
  REQUIRE_THROWS_WITH(cell.recompute(three_x_squared, rng),
                      "recompute of a cell that was already recomputed");
  REQUIRE(cell.backward({g()})[0].to_vector<float>() == six_x_g());
}

TEST_CASE("recompute of a recorded cell is refused") {
  Generator rng(1);
  Cell cell;
  cell.forward(three_x_squared, {x()}, CellMode::kRecord, rng);
  REQUIRE_THROWS_WITH(cell.recompute(three_x_squared, rng),
                      "recompute of a cell that was not checkpointed");
  REQUIRE(cell.backward({g()})[0].to_vector<float>() == six_x_g());  // the graph is intact
}

TEST_CASE("a gradient count that differs from the outputs names both counts") {
  Generator rng(1);
  Cell cell;
  cell.forward(three_x_squared, {x()}, CellMode::kRecord, rng);
  REQUIRE_THROWS_WITH(cell.backward({g(), g()}),
                      "a stage produced 1 outputs but received 2 gradients");
}

TEST_CASE("a stage that throws in forward leaves no graph behind") {
  Generator rng(1);
  Cell cell;
  const StageFn fails = [](const nn::Tensors&) -> nn::Tensors {
    throw std::domain_error("stage failed");
  };
  REQUIRE_THROWS_AS(cell.forward(fails, {x()}, CellMode::kRecord, rng), std::domain_error);
  REQUIRE_THROWS_WITH(cell.backward({g()}), "backward of a cell that holds no graph");
}

TEST_CASE("a recompute that throws restores the generator and can be retried") {
  Generator rng(7);
  Tensor noise = Tensor::zeros({3});
  // y = x · u with u ~ U[0, 1) drawn from `rng`: dy/dx · g = u g, and u = y / x.
  const StageFn noisy = [&](const nn::Tensors& in) -> nn::Tensors {
    rng.uniform_(noise);
    return {autograd::mul(in[0], noise)};
  };
  Cell cell;
  const nn::Tensors out = cell.forward(noisy, {x()}, CellMode::kCheckpoint, rng);
  const uint64_t seed = rng.seed(), offset = rng.offset();
  int calls = 0;
  const StageFn fails_once = [&](const nn::Tensors& in) -> nn::Tensors {
    nn::Tensors y = noisy(in);  // draws, then fails
    if (++calls == 1) throw std::runtime_error("recompute failed");
    return y;
  };
  REQUIRE_THROWS_WITH(cell.recompute(fails_once, rng), "recompute failed");
  REQUIRE(rng.seed() == seed);
  REQUIRE(rng.offset() == offset);
  cell.recompute(fails_once, rng);  // replays the forward's draws, consumes none
  REQUIRE(rng.offset() == offset);
  const std::vector<float> y = out[0].to_vector<float>();
  const std::vector<float> dx = cell.backward({g()})[0].to_vector<float>();
  for (size_t i = 0; i < kX.size(); ++i) REQUIRE(dx[i] == Approx(y[i] / kX[i] * kG[i]));
}
