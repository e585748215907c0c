// Activation memory per checkpoint mode, from the allocator's exact byte counters.
//
// Each case uses its own virtual CPU devices (cpu:40..cpu:45), so nothing else allocates on
// them, and asserts EXACT byte counts derived in docs/pipeline.md, "Memory, exactly". The
// stage measured is  Linear(D→H, no bias) · ReLU · Linear(H→O, no bias)  on micro-batches of
// n rows (N rows in m micro-batches); sizes below are float32 elements (× 4 bytes).
//
// Forward of one recorded cell on its device (x arrives from the left stage's send):
//   x [n,D]   h = x·W1ᵀ [n,H]   r = relu(h) [n,H]  (h freed)   o = r·W2ᵀ [n,O]
//   kept for backward: x (Linear1 saves it), r (ReLU and Linear2 save it), o (the tape's
//   root) = n(D+H+O); the peak inside the cell is while h and r coexist: n(D+2H).
// A checkpointed cell keeps only x; h, r, o are freed as soon as o is sent.
#include <catch2/catch.hpp>

#include <algorithm>

#include "nn/activation.h"
#include "nn/linear.h"
#include "pipeline/pipe.h"
#include "tensor/allocator.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

namespace {

constexpr int64_t I = 8, D = 16, H = 32, O = 4, N = 8;
constexpr int64_t kF = 4;  // bytes per float32

// Stage 0: Linear(I→D); stage 1: Linear(D→H) ReLU Linear(H→O); [stage 2: Linear(O→2)].
nn::Sequential model(bool three_stages) {
  nn::Sequential m(nn::Linear(I, D, false), nn::Linear(D, H, false), nn::ReLU(),
                   nn::Linear(H, O, false));
  if (three_stages) m.push_back(nn::Linear(O, 2, false));
  return m;
}

struct Counter {
  Allocator& a;
  int64_t base = 0;
  explicit Counter(Device d) : a(allocator_for(d)) { start(); }
  void start() {
    base = a.allocated();
    a.reset_peak();
  }
  int64_t peak() const { return (a.peak() - base) / kF; }    // in float32 elements
  int64_t held() const { return (a.allocated() - base) / kF; }
};

}  // namespace

TEST_CASE("a middle stage holds m micro-batches (never) or m inputs + one cell (always)") {
  const int m = GENERATE(2, 4, 8);
  const Checkpoint mode =
      GENERATE(Checkpoint::kNever, Checkpoint::kExceptLast, Checkpoint::kAlways);
  CAPTURE(m, to_string(mode));
  const int64_t n = N / m;
  Pipe pipe(model(true), {.balance = {1, 3, 1},
                          .devices = {Device::cpu(40), Device::cpu(41), Device::cpu(42)},
                          .chunks = m,
                          .schedule = {.recompute = mode}});
  const Tensor x = randn({N, I}, 1, Device::cpu(40));
  Counter stage1(Device::cpu(41));
  Tensor out = pipe.forward(x);

  switch (mode) {
    case Checkpoint::kNever:
      // Every micro-batch's activations stay until its backward.
      REQUIRE(stage1.held() == N * (D + H + O));
      REQUIRE(stage1.peak() == N * D + (N - n) * (H + O) + n * 2 * H);
      break;
    case Checkpoint::kExceptLast:
      REQUIRE(stage1.held() == N * D + n * (H + O));
      REQUIRE(stage1.peak() == N * D + n * 2 * H);
      break;
    case Checkpoint::kAlways:
      // Only the m boundary inputs, plus one cell's internals at the peak.
      REQUIRE(stage1.held() == N * D);
      REQUIRE(stage1.peak() == N * D + n * 2 * H);
      break;
  }
}

// The last stage's memory is fully deterministic through the backward too: its inputs all
// arrive during the forward, its output gradient is the user's, and the gradients it sends
// are copied to the left stage's device at send time.
TEST_CASE("last stage: exact peaks of forward and backward per checkpoint mode") {
  const int m = GENERATE(2, 4);
  const Checkpoint mode =
      GENERATE(Checkpoint::kNever, Checkpoint::kExceptLast, Checkpoint::kAlways);
  CAPTURE(m, to_string(mode));
  const int64_t n = N / m;
  const int64_t G = H * D + O * H;      // parameter gradients W1.grad, W2.grad
  const int64_t A = n * (D + H + O);    // one recorded cell's activations
  Pipe pipe(model(false), {.balance = {1, 3},
                           .devices = {Device::cpu(43), Device::cpu(44)},
                           .chunks = m,
                           .schedule = {.recompute = mode}});
  const Tensor x = randn({N, I}, 2, Device::cpu(43));
  const Tensor grad = Tensor::ones({N, O}, {.device = Device::cpu(44)});
  Counter last(Device::cpu(44));

  // Forward: as a middle stage, plus the outputs kept for gathering (n·O per micro-batch
  // until the end) and the gathered output itself (N·O).
  Tensor out = pipe.forward(x);
  int64_t held_f = 0, peak_f = 0;
  switch (mode) {
    case Checkpoint::kNever:
      held_f = N * (D + H + O) + N * O;
      peak_f = std::max(N * D + (N - n) * (H + O) + n * 2 * H, held_f);
      break;
    case Checkpoint::kExceptLast:
      held_f = N * D + n * (H + O) + N * O;
      peak_f = std::max(N * D + (N - n) * O + n * 2 * H, N * D + n * (H + O) + 2 * N * O);
      break;
    case Checkpoint::kAlways:
      held_f = N * D + N * O;
      peak_f = std::max(N * D + (N - n) * O + n * 2 * H, N * D + 2 * N * O);
      break;
  }
  REQUIRE(last.held() == held_f);
  REQUIRE(last.peak() == peak_f);

  // Backward (relative to the end of the forward). The first B creates .grad: at its Linear1
  // node it holds the new dW1 and dW2 (G) and dX (n·D). Later Bs add their weight gradients
  // straight into .grad (Note [Weight gradients accumulated in place], autograd/node.h), so
  // their peak is at ReLU's node, where dR and dH coexist (2n·H); a recompute first rebuilds
  // r and o (n·(H+O)); the cells already done have freed their A = n·(D+H+O).
  last.start();
  out.backward(grad);
  switch (mode) {
    case Checkpoint::kNever:  // the first B: G + n·D (a later one: G - A + 2nH, smaller)
      REQUIRE(last.peak() == G + n * D);
      REQUIRE(last.held() == G - N * (D + H + O));
      break;
    case Checkpoint::kExceptLast:  // the second B, after its R: G - A + n(H+O) + 2nH
      REQUIRE(last.peak() == G - A + n * (H + O) + 2 * n * H);
      REQUIRE(last.held() == G - N * D - n * (H + O));
      break;
    case Checkpoint::kAlways:  // the second B, after its R, n(H+O) more
      REQUIRE(last.peak() == G - A + 2 * n * (H + O) + 2 * n * H);
      REQUIRE(last.held() == G - N * D);
      break;
  }
  REQUIRE(pipe.last_counters().recomputes[1] ==
          (mode == Checkpoint::kAlways ? m : mode == Checkpoint::kExceptLast ? m - 1 : 0));
}

// Note [16-bit checkpoints] (pipeline/cell.h): under bf16 a checkpointed cell keeps the
// message as it arrived, 2 bytes a value, where float32 keeps 4; the stage also holds its
// 16-bit working copies of W1 and W2 for the step (Note [The precision policy]).
TEST_CASE("under bf16 a checkpointed middle stage keeps its inputs in 16 bits") {
  const autograd::Precision precision =
      GENERATE(autograd::Precision::kFloat32, autograd::Precision::kBFloat16);
  const int m = GENERATE(2, 4);
  CAPTURE(autograd::precision_name(precision), m);
  Pipe pipe(model(true), {.balance = {1, 3, 1},
                          .devices = {Device::cpu(40), Device::cpu(41), Device::cpu(42)},
                          .chunks = m,
                          .schedule = {.recompute = Checkpoint::kAlways},
                          .precision = precision});
  const Tensor x = randn({N, I}, 1, Device::cpu(40));
  Allocator& stage1 = allocator_for(Device::cpu(41));
  const int64_t before = stage1.allocated();
  Tensor out = pipe.forward(x);
  const bool bf16 = precision == autograd::Precision::kBFloat16;
  const int64_t kept = N * D * (bf16 ? 2 : kF);
  const int64_t working_copies = bf16 ? (H * D + O * H) * 2 : 0;
  CHECK(stage1.allocated() - before == kept + working_copies);
  // The recompute widens them again: the backward runs, every parameter gets its gradient.
  out.backward(Tensor::ones(out.shape(), {.device = out.device()}));
  CHECK(pipe.last_counters().recomputes[1] == m);
  for (const Tensor& p : pipe.parameters()) CHECK(p.grad().defined());
}
