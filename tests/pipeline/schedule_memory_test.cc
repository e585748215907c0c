// Peak activation memory of every schedule, measured on the runtime to the byte.
//
// The schedules' memory formulas (docs/schedules.md, "Memory") count *cells*: one
// micro-batch's activations on one stage. Here Pipe::train_step runs each schedule on a model
// whose activation sizes are known from its shapes, and each worker's allocator peak() is
// compared with the peak the schedule implies, exactly.
//
// Note [A stage whose activations live on their own device]
// Activations and gradients crossing stages are copied to the receiver's device by the
// *sender*, at send time (Note [Where the copy happens], transport.h), so the bytes on a
// stage's device also depend on when its neighbours run: a measured peak there is a matter
// of thread timing, not of the schedule. Each stage of the test model is therefore
//
//     StackOnDevice:  x ──to(act)──► Linear(D→H) · ReLU · Linear(H→D) ──to(x's device)──►
//
// a Linear/ReLU stack whose parameters, gradients and saved activations live on an
// "activation device" act(w) that only its own worker touches (one per worker: with
// interleaving a worker's v stages share it, as the formulas count per worker). Messages stay
// on the stage devices cpu(base + w), which the Pipe owns. act(w)'s counter then moves only
// in the order of worker w's action list, so its peak is a function of the schedule alone.
//
// Sizes, in float32 elements (× 4 bytes), for a micro-batch of n rows (H > D):
//   F  x' = to(x) [n,D]; h = x'·W1ᵀ [n,H]; r = relu(h) [n,H] (h freed: nothing saved it);
//      o = r·W2ᵀ [n,D] (sent as to(o), then freed).   Kept: x' (Linear1), r (ReLU, Linear2)
//        A   = n(D+H)     held by a recorded cell from its F (or R) until its B (or W)
//        X_F = n(D+2H)    F's own peak: x', h and r at once (o comes after h is freed)
//      A checkpointed F keeps nothing here (its input stays on the stage device) and peaks at
//      the same X_F; R then keeps A like a recorded F.
//   B  (the .grad tensors already exist, so dW1, dW2 are GEMMs into them: no allocation)
//      g = to(dO) [n,D]; dR = g·W2 [n,H] (then g freed); dH = relu'(dR, r) [n,H] (then r,
//      dR freed); dX' = dH·W1 [n,D] (then x', dH freed); dX = to(dX') leaves for the left.
//        X_B = n(D+3H)    B's peak, its own x' and r included: x' + r + dR + dH
//   I  as B, but Linear1 and Linear2 defer their weight gradients (autograd's B/W split): the
//      queued nodes keep their saved x', r and their output gradients g, dH until W.
//        X_I = n(2D+3H)   I's peak: x' + r + g + dR + dH
//        A_I = n(2D+2H)   what the cell holds after I until its W: x' + r + g + dH
//   W  dW into .grad (no allocation), then x', r, g, dH freed: peak = what was held.
//
// The expected peak is a replay of worker w's action list with these sizes
// (expected_peak_bytes below). For schedules with a plain B it reduces to a closed form: the
// worst moment is a B that runs while k-1 other cells are held,
//     peak = (k-1)·A + X_B,   k = peak_memory(schedule).worker_activations[w]
// — k = m for GPipe, min(p-s, m) for 1F1B, p·v + p - 1 virtual-stage cells on worker 0 of
// interleaved 1F1B, 1 with checkpoint 'always' — and those k are checked against the formulas
// too.
// With I/W, a held cell weighs A before its I and A_I after, so the replay is the reference;
// its number of cells in flight at the peak is checked against peak_memory (p for ZB-H1 on
// stage 0, 2p-1 for ZB-H2 with m >= 2p-1).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/reduction.h"
#include "autograd/shape_ops.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/sequential.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule/generators.h"
#include "pipeline/schedule/replay.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"

using namespace pipewright;
using namespace pipewright::pipeline;

namespace {

constexpr int64_t kBytes = 4;                // float32
constexpr int64_t n = 4, D = 8, H = 16;      // rows per micro-batch, boundary width, hidden
constexpr int64_t A = n * (D + H);           // see the file comment
constexpr int64_t A_I = n * (2 * D + 2 * H);
constexpr int64_t X_F = n * (D + 2 * H);
constexpr int64_t X_B = n * (D + 3 * H);
constexpr int64_t X_I = n * (2 * D + 3 * H);
constexpr int64_t kParams = 2 * H * D;       // W1 [H,D] + W2 [D,H] of one stage

// Note [A stage whose activations live on their own device]. The stack is a member, not a
// registered child: the Pipe's Module::to(stage device) must not move it.
class StackOnDevice final : public nn::Module {
 public:
  StackOnDevice(Device act, uint64_t seed) : act_(act) {
    Generator g(seed);
    GeneratorGuard guard(g);
    stack_.push_back(nn::Linear(D, H, /*bias=*/false, {.device = act}));
    stack_.push_back(nn::ReLU());
    stack_.push_back(nn::Linear(H, D, /*bias=*/false, {.device = act}));
  }
  using nn::Module::forward;
  Tensor forward(const Tensor& x) override {
    Tensor y = stack_.forward(autograd::to(x, act_));
    return autograd::to(y, x.device());
  }
  std::string str() const override { return "StackOnDevice(" + act_.str() + ")"; }
  nn::Module& stack() { return stack_; }

 private:
  Device act_;
  nn::Sequential stack_;
};

Tensor sum_loss(const Tensor& out, const Tensor& /*target*/) {
  return autograd::sum(out);  // a one-element loss whose gradient is ones
}

// Expected peak on worker w's activation device, above what is held before the step (in
// float32 elements): worker w's actions replayed with the sizes of the file comment.
struct Replay {
  int64_t peak = 0;
  int cells_at_peak = 0;  // cells holding activations (F/R done, B/W not yet) at that moment
};

Replay expected_peak(const Schedule& s, int w) {
  std::map<std::pair<int, int>, int64_t> held;  // (stage, micro-batch) -> elements held
  int64_t total = 0;
  Replay r;
  auto observe = [&](int64_t at, int cells) {
    if (at > r.peak) {
      r.peak = at;
      r.cells_at_peak = cells;
    }
  };
  std::map<std::pair<int, int>, bool> checkpointed;
  for (const Action& a : s.actions[static_cast<size_t>(w)]) {
    if (a.kind == ActionKind::kRecompute) checkpointed[{a.stage, a.microbatch}] = true;
  }
  for (const Action& a : s.actions[static_cast<size_t>(w)]) {
    const std::pair<int, int> cell{a.stage, a.microbatch};
    const int others = static_cast<int>(held.size()) - (held.count(cell) ? 1 : 0);
    switch (a.kind) {
      case ActionKind::kForward:
        observe(total + X_F, others + 1);
        if (!checkpointed.count(cell)) {
          held[cell] = A;
          total += A;
        }
        break;
      case ActionKind::kRecompute:
        observe(total + X_F, others + 1);
        held[cell] = A;
        total += A;
        break;
      case ActionKind::kBackward:
        observe(total - held.at(cell) + X_B, others + 1);
        total -= held.at(cell);
        held.erase(cell);
        break;
      case ActionKind::kBackwardInput:
        observe(total - held.at(cell) + X_I, others + 1);
        total += A_I - held.at(cell);
        held[cell] = A_I;
        break;
      case ActionKind::kBackwardWeight:
        observe(total, others + 1);
        total -= held.at(cell);
        held.erase(cell);
        break;
    }
  }
  REQUIRE(total == 0);
  return r;
}

struct Case {
  std::string schedule;
  int p, m, v;
  Checkpoint mode;
};

struct Measured {
  std::vector<int64_t> base, peak, after;  // per worker, in float32 elements
};

// Devices: stage (message) devices cpu(first + w), activation devices cpu(first + p + w).
Measured run(const Case& c, int first_device) {
  const int stages = c.p * c.v;
  nn::Sequential model;
  std::vector<Device> devices;
  for (int w = 0; w < c.p; ++w) devices.push_back(Device::cpu(first_device + w));
  for (int s = 0; s < stages; ++s) {
    model.push_back(StackOnDevice(Device::cpu(first_device + c.p + s % c.p), 100 + s));
  }
  Pipe pipe(std::move(model), {.balance = std::vector<int>(static_cast<size_t>(stages), 1),
                               .devices = devices,
                               .chunks = c.m,
                               .schedule = {.name = c.schedule, .virtual_stages = c.v,
                                            .recompute = c.mode},
                               .threads_per_worker = 1});
  Tensor x = Tensor::ones({n * c.m, D}, {.device = devices.front()});
  x.set_requires_grad(true);  // so stage 0 computes dX like every other stage
  const Tensor y = Tensor::zeros({n * c.m, D}, {.device = devices.back()});

  // A first step creates every .grad: from then on weight gradients are GEMMs into them.
  pipe.train_step(x, y, sum_loss);
  Measured out;
  for (int w = 0; w < c.p; ++w) {
    Allocator& a = allocator_for(Device::cpu(first_device + c.p + w));
    out.base.push_back(a.allocated() / kBytes);
    a.reset_peak();
  }
  pipe.train_step(x, y, sum_loss);
  for (int w = 0; w < c.p; ++w) {
    Allocator& a = allocator_for(Device::cpu(first_device + c.p + w));
    out.peak.push_back((a.peak() / kBytes) - out.base[static_cast<size_t>(w)]);
    out.after.push_back(a.allocated() / kBytes);
  }
  return out;
}

Schedule schedule_of(const Case& c) {
  Schedule s = make_schedule(c.schedule, c.p, c.m, c.v);
  return with_recompute(s, checkpoint_predicate(c.mode, c.m));
}

// The closed forms of docs/schedules.md for the peak cells of worker w (non-split schedules,
// nothing checkpointed); -1 where no closed form is stated.
int closed_form_cells(const Case& c, int w) {
  if (c.schedule == "gpipe") return c.m;
  if (c.schedule == "1f1b") return std::min(c.p - w, c.m);
  if (c.schedule == "interleaved-1f1b" && c.m >= 2 * c.p) {
    // Megatron's warm-up: 2(p-w-1) + (v-1)p forwards, then one more before the first B; on
    // worker 0 that is p·v + p - 1 virtual-stage cells = A(p + (p-1)/v) in whole-stage units.
    return std::min(2 * (c.p - w - 1) + (c.v - 1) * c.p + 1, c.m * c.v);
  }
  if (c.schedule == "interleaved-1f1b" && c.m == c.p && w == 0) return c.m * c.v;  // all F first
  return -1;
}

}  // namespace

TEST_CASE("each worker's activation peak equals the schedule's, to the byte") {
  const std::string schedule =
      GENERATE(as<std::string>{}, "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2");
  const int p = GENERATE(2, 4);
  const int m = GENERATE(2, 4, 8);
  const Checkpoint mode = GENERATE(Checkpoint::kNever, Checkpoint::kExceptLast,
                                   Checkpoint::kAlways);
  const int v = schedule == "interleaved-1f1b" ? 2 : 1;
  if (schedule == "interleaved-1f1b" && m % p != 0) return;  // requires m % p == 0
  const Case c{schedule, p, m, v, mode};
  CAPTURE(schedule, p, m, v, to_string(mode));

  const Schedule s = schedule_of(c);
  const MemoryPeaks cells = peak_memory(s);
  const Measured got = run(c, 60);
  for (int w = 0; w < p; ++w) {
    CAPTURE(w);
    const size_t i = static_cast<size_t>(w);
    // Before the step a worker's activation device holds its stages' parameters and their
    // .grad: 2 · (W1 + W2) per stage, v stages per worker.
    REQUIRE(got.base[i] == 2 * kParams * v);
    // Everything the step allocated there is freed when it ends.
    REQUIRE(got.after[i] == got.base[i]);

    const Replay want = expected_peak(s, w);
    REQUIRE(got.peak[i] == want.peak);
    REQUIRE(want.cells_at_peak == cells.worker_activations[i]);

    const bool split = schedule == "zb-h1" || schedule == "zb-h2";
    if (!split) {
      // The worst moment is a B with k-1 other cells held.
      const int k = cells.worker_activations[i];
      REQUIRE(got.peak[i] == (k - 1) * A + X_B);
      if (mode == Checkpoint::kAlways) {
        REQUIRE(k == 1);  // R·B pairs: one cell at a time
      } else if (mode == Checkpoint::kNever && closed_form_cells(c, w) >= 0) {
        REQUIRE(k == closed_form_cells(c, w));
      }
    } else if (mode == Checkpoint::kNever) {
      // The zero-bubble formulas, on the count: ZB-H1 holds min(p, m) on stage 0 (like 1F1B),
      // ZB-H2 up to 2p-1.
      if (schedule == "zb-h1" && w == 0) REQUIRE(cells.worker_activations[i] == std::min(p, m));
      if (schedule == "zb-h2" && m >= 2 * p - 1) {
        REQUIRE(*std::max_element(cells.worker_activations.begin(),
                                  cells.worker_activations.end()) == 2 * p - 1);
      }
    }
  }
}

// GPipe against 1F1B side by side (1F1B's promise: its stage 0 holds at most p/m of GPipe's
// activation memory). The peak is k held cells plus one backward's working memory, X_B - A,
// the same in both: the held activations, peak - (X_B - A) = k·A, are exactly p/m of GPipe's.
TEST_CASE("1F1B stage 0 holds p micro-batches where GPipe holds m") {
  const int p = GENERATE(2, 4);
  const int m = 8;
  CAPTURE(p);
  const Measured gpipe = run({"gpipe", p, m, 1, Checkpoint::kNever}, 70);
  const Measured ofob = run({"1f1b", p, m, 1, Checkpoint::kNever}, 70);
  REQUIRE(gpipe.peak[0] == (m - 1) * A + X_B);
  REQUIRE(ofob.peak[0] == (p - 1) * A + X_B);
  const int64_t working = X_B - A;
  REQUIRE((ofob.peak[0] - working) * m == (gpipe.peak[0] - working) * p);
}

// With one stage there are no messages, so the stage device itself is deterministic: under
// 1F1B a single stage runs F0 B0 F1 B1 ..., one micro-batch at a time, and its peak grows with
// m only by the micro-batches' losses, one float32 each, kept on the device until the step
// reads them all at once (Note [One read per step], pipeline/step_readback.cc); anything else
// kept per micro-batch until the end of the step would show here.
TEST_CASE("a single stage under 1F1B: the stage device's peak grows with m by the losses alone") {
  auto peak_of = [](int m) {
    const Device dev = Device::cpu(80 + m);
    nn::Sequential model;
    model.push_back(StackOnDevice(Device::cpu(90 + m), 7));
    Pipe pipe(std::move(model), {.balance = {1},
                                 .devices = {dev},
                                 .chunks = m,
                                 .schedule = {.name = "1f1b"},
                                 .threads_per_worker = 1});
    const Tensor x = Tensor::ones({n * m, D}, {.device = dev});
    const Tensor y = Tensor::zeros({n * m, D}, {.device = dev});
    pipe.train_step(x, y, sum_loss);
    Allocator& a = allocator_for(dev);
    const int64_t base = a.allocated();
    a.reset_peak();
    pipe.train_step(x, y, sum_loss);
    REQUIRE(a.allocated() == base);
    return a.peak() - base;
  };
  REQUIRE(peak_of(8) - peak_of(2) == (8 - 2) * static_cast<int64_t>(sizeof(float)));
}
