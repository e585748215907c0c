// Fault injection on GPUs (run on simulated GPUs by --config=cudasim), the CUDA
// counterpart of tests/pipeline/pipe_fault_test.cc, smaller than its CPU matrix: every worker
// computes on its own stream and messages cross on copy streams with events.
//   - an allocation failure in the caching allocator (CachingAllocator::fail_allocation_after:
//     the CudaError of a device out of memory) at chosen allocation counts of a train_step, and
//     armed when a worker begins its first backward (so it fires inside that backward);
//   - the fault hook (an exception before a chosen action) over schedules × checkpoint modes ×
//     two placements (cuda:0 -> cuda:1, and cuda:0 -> cuda:1 -> cuda:0);
//   - a layer throwing on its k-th call (a forward, or a recompute inside a backward action).
// Each time: the exception reaches the caller with its type and message, no thread hangs (a
// watchdog aborts the test), last_failure() names the worker, the device allocators' allocated
// bytes return to their pre-step values, deferred BatchNorm statistics are untouched, and the
// next step equals a fresh Pipe's bit for bit.
// And a stage whose output lands on the other GPU (Note [A stage's output on another device],
// pipeline/stage_fn.cc): copied back, forward() returns on the last stage's device.
// Where one GPU is present the placements fold onto it (gpu_or_shared: two workers, two
// streams, one device); the last case needs two GPUs.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cuda_kernels/caching_allocator.h"
#include "cuda_kernels/check.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "pipeline/pipe_test_access.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"
#include "tests/compare.h"
#include "tests/cuda/gpu_test.h"
#include "tests/pipeline/pipe_test_util.h"

namespace pipewright::testing {
namespace {

using pipeline::Action;
using pipeline::ActionKind;
using pipeline::Checkpoint;
using pipeline::Failure;
using pipeline::Pipe;
using pipeline::PipeTestAccess;
using pipeline::StepResult;
using pipeline::testing::arm_fault;
using pipeline::testing::buffers_of;
using pipeline::testing::fault_message;
using pipeline::testing::grads_of;
using pipeline::testing::InjectedFault;
using pipeline::testing::MoveTo;
using pipeline::testing::named_schedule;
using pipeline::testing::randn;
using pipeline::testing::ThrowInForward;
using pipeline::testing::Watchdog;

constexpr int kDisarmed = 1 << 30;

// Linear(16,32) BatchNorm1d ReLU Linear(32,32) [thrower] Tanh Linear(32,8), from seed 1.
nn::Sequential model(std::shared_ptr<std::atomic<int>> countdown = nullptr) {
  Generator g(1);
  GeneratorGuard guard(g);
  nn::Sequential m(nn::Linear(16, 32), nn::BatchNorm1d(32), nn::ReLU(), nn::Linear(32, 32));
  if (countdown) m.push_back(ThrowInForward(std::move(countdown), "layer exploded on the GPU"));
  m.push_back(nn::Tanh());
  m.push_back(nn::Linear(32, 8));
  return m;
}

// p = 2: cuda:0 -> cuda:1; p = 3: cuda:0 -> cuda:1 -> cuda:0 (workers 0 and 2 share a GPU).
// With one GPU every worker is on cuda:0 (gpu_or_shared).
Pipe make_pipe(int p, Checkpoint ckpt, int m, std::shared_ptr<std::atomic<int>> countdown = {}) {
  const int extra = countdown ? 1 : 0;  // the thrower is in stage 1 either way
  std::vector<int> balance = p == 2 ? std::vector<int>{3, 3 + extra}
                                    : std::vector<int>{3, 2 + extra, 1};
  std::vector<Device> devices = {gpu_or_shared(0), gpu_or_shared(1)};
  if (p == 3) devices.push_back(gpu_or_shared(0));
  return Pipe(model(std::move(countdown)), {.balance = std::move(balance),
                                            .devices = std::move(devices),
                                            .chunks = m,
                                            .schedule = {.recompute = ckpt},
                                            .deferred_batch_norm = true});
}

Tensor mse(const Tensor& out, const Tensor& t) { return nn::mse_loss(out, t.to(out.device())); }

std::vector<int64_t> gpu_allocated() {
  return {allocator_for(gpu_or_shared(0)).allocated(), allocator_for(gpu_or_shared(1)).allocated()};
}

// The allocator of worker `worker`'s GPU.
cuda::CachingAllocator& caching(int worker) {
  return dynamic_cast<cuda::CachingAllocator&>(allocator_for(gpu_or_shared(worker)));
}

bool is_backward(ActionKind k) {
  return k == ActionKind::kBackward || k == ActionKind::kBackwardInput ||
         k == ActionKind::kBackwardWeight;
}

struct Reference {
  std::vector<double> losses;
  nn::NamedTensors grads;
  pipeline::Schedule schedule;
};

Reference reference(int p, Checkpoint ckpt, int m, const Tensor& x, const Tensor& y,
                    const std::string& schedule) {
  Pipe fresh = make_pipe(p, ckpt, m);
  const StepResult r = fresh.train_step(x, y, mse,
                                        {.schedule = named_schedule(fresh, x, schedule)});
  return {r.microbatch_losses, grads_of(fresh.module()), r.schedule};
}

// After a failed step: the allocators are back, nothing was committed, and the next step
// equals `ref` bit for bit.
void check_recovered(Pipe& pipe, const std::vector<int64_t>& before,
                     const nn::NamedTensors& stats, const Reference& ref,
                     const Tensor& x, const Tensor& y, const std::string& schedule) {
  REQUIRE(bitwise_equal(buffers_of(pipe.module()), stats));
  pipe.zero_grad();
  REQUIRE(gpu_allocated() == before);
  const StepResult r = pipe.train_step(x, y, mse, {.schedule = named_schedule(pipe, x, schedule)});
  REQUIRE(r.microbatch_losses == ref.losses);
  REQUIRE(bitwise_equal(grads_of(pipe.module()), ref.grads));
  REQUIRE_FALSE(pipe.last_failure().has_value());
}

TEST_CASE("an allocation failure in the GPU caching allocator during train_step",
          "[cuda][pipe][fault]") {
  if (!gpu_available_or_skip()) return;
  const int m = 4;
  const Tensor x = randn({16, 16}, 2), y = randn({16, 8}, 3);
  const Reference ref = reference(2, Checkpoint::kExceptLast, m, x, y, "1f1b");
  Pipe pipe = make_pipe(2, Checkpoint::kExceptLast, m);
  int failures = 0, mid_backward = 0, outside_actions = 0;
  for (const bool at_backward : {false, true}) {
    for (int gpu = 0; gpu < 2; ++gpu) {
      for (const int after : {0, 2, 7, 20, 60}) {
        if (at_backward && after > 7) continue;
        CAPTURE(at_backward, gpu, after);
        Watchdog watchdog("train_step with a GPU allocation failure", 300);
        pipe.zero_grad();
        const std::vector<int64_t> before = gpu_allocated();
        const nn::NamedTensors stats = buffers_of(pipe.module());
        auto armed = std::make_shared<std::optional<Action>>();
        if (at_backward) {
          // Worker `gpu` computes on cuda:`gpu`; armed when it begins its first backward.
          PipeTestAccess::set_fault_hook(pipe, [gpu, after, armed](int w, int, const Action& a) {
            if (w == gpu && !armed->has_value() && is_backward(a.kind)) {
              *armed = a;
              caching(gpu).fail_allocation_after(after);
            }
          });
        } else {
          caching(gpu).fail_allocation_after(after);
        }
        bool failed = false;
        try {
          pipe.train_step(x, y, mse, {.schedule = named_schedule(pipe, x, "1f1b")});
        } catch (const cuda::CudaError& e) {
          failed = true;
          REQUIRE(e.code() == static_cast<int>(cudaErrorMemoryAllocation));
          REQUIRE_THAT(e.what(), Catch::StartsWith("CachingAllocator: cudaMalloc of ") &&
                                     Catch::Contains(" on " + gpu_or_shared(gpu).str() +
                                                     " failed: "));
        }
        PipeTestAccess::set_fault_hook(pipe, nullptr);
        caching(gpu).fail_allocation_after(-1);
        REQUIRE(failed);  // every count here is below the step's allocations on each GPU
        ++failures;
        // In an action, or outside all of them (the caller's thread moving the targets to the
        // last stage's GPU before the actions): then last_failure() is nullopt (pipe.h).
        const std::optional<Failure> f = pipe.last_failure();
        if (!f.has_value()) ++outside_actions;
        if (f && at_backward && f->worker == gpu && f->action == **armed) ++mid_backward;
        check_recovered(pipe, before, stats, ref, x, y, "1f1b");
      }
    }
  }
  std::printf("GPU allocation failures: %d injected and survived, %d inside the armed backward, "
              "%d outside any action\n", failures, mid_backward, outside_actions);
  REQUIRE(failures == 2 * 5 + 2 * 3);
  REQUIRE(mid_backward >= 1);
}

TEST_CASE("a fault before an action on GPUs with streams: schedules, modes, placements",
          "[cuda][pipe][fault]") {
  if (!gpu_available_or_skip()) return;
  const int m = 3;
  const Tensor x = randn({2 * m, 16}, 4), y = randn({2 * m, 8}, 5);
  int faults = 0;
  for (const std::string schedule : {"gpipe", "1f1b", "zb-h1"}) {
    for (const Checkpoint ckpt : {Checkpoint::kExceptLast, Checkpoint::kNever}) {
      for (const int p : {2, 3}) {
        CAPTURE(schedule, pipeline::to_string(ckpt), p);
        const Reference ref = reference(p, ckpt, m, x, y, schedule);
        Pipe pipe = make_pipe(p, ckpt, m);
        const pipeline::Schedule& s = ref.schedule;
        std::mt19937 rng(static_cast<unsigned>(p * 10 + static_cast<int>(ckpt)));
        for (int w = 0; w < p; ++w) {
          const int n = static_cast<int>(s.actions[w].size());
          for (const int i : {0, std::uniform_int_distribution<int>(1, n - 2)(rng), n - 1}) {
            CAPTURE(w, i);
            Watchdog watchdog("GPU train_step with a fault before an action", 300);
            pipe.zero_grad();
            const std::vector<int64_t> before = gpu_allocated();
            const nn::NamedTensors stats = buffers_of(pipe.module());
            auto fired = arm_fault(pipe, w, i);
            REQUIRE_THROWS_MATCHES(pipe.train_step(x, y, mse,
                                                   {.schedule = named_schedule(pipe, x, schedule)}),
                                   InjectedFault,
                                   Catch::Message(fault_message(w, i)));
            PipeTestAccess::set_fault_hook(pipe, nullptr);
            REQUIRE(fired->load());
            ++faults;
            const std::optional<Failure> f = pipe.last_failure();
            REQUIRE(f.has_value());
            REQUIRE((f->worker == w && f->action_index == i));
            REQUIRE(f->action == s.actions[w][static_cast<size_t>(i)]);
            REQUIRE(f->actions_after <= p - 1);
            check_recovered(pipe, before, stats, ref, x, y, schedule);
          }
        }
      }
    }
  }
  std::printf("GPU fault-hook sweep: %d faults injected and survived\n", faults);
  REQUIRE(faults == 3 * 2 * (2 + 3) * 3);
}

TEST_CASE("a layer that throws on its k-th call on a GPU, across schedules",
          "[cuda][pipe][fault]") {
  if (!gpu_available_or_skip()) return;
  const int m = 3;
  const Tensor x = randn({2 * m, 16}, 6), y = randn({2 * m, 8}, 7);
  int faults = 0, in_recompute = 0;
  for (const std::string schedule : {"gpipe", "1f1b", "zb-h1"}) {
    CAPTURE(schedule);
    auto countdown = std::make_shared<std::atomic<int>>(kDisarmed);
    Pipe fresh = make_pipe(2, Checkpoint::kAlways, m, countdown);
    const StepResult r0 = fresh.train_step(x, y, mse,
                                           {.schedule = named_schedule(fresh, x, schedule)});
    const Reference ref{r0.microbatch_losses, grads_of(fresh.module()), r0.schedule};
    const int calls = kDisarmed - countdown->load();
    REQUIRE(calls == 2 * m);  // m forwards, m recomputes
    Pipe pipe = make_pipe(2, Checkpoint::kAlways, m, countdown);
    for (int k = 1; k <= calls; ++k) {
      CAPTURE(k);
      Watchdog watchdog("GPU train_step with a throwing layer", 300);
      pipe.zero_grad();
      const std::vector<int64_t> before = gpu_allocated();
      const nn::NamedTensors stats = buffers_of(pipe.module());
      countdown->store(k);
      REQUIRE_THROWS_MATCHES(
          pipe.train_step(x, y, mse, {.schedule = named_schedule(pipe, x, schedule)}),
          std::domain_error,
          Catch::Message("layer exploded on the GPU"));
      countdown->store(kDisarmed);
      ++faults;
      const std::optional<Failure> f = pipe.last_failure();
      REQUIRE(f.has_value());
      REQUIRE(f->action.stage == 1);
      if (f->action.kind != ActionKind::kForward) ++in_recompute;
      check_recovered(pipe, before, stats, ref, x, y, schedule);
    }
  }
  std::printf("GPU layer throwing mid-action: %d faults injected and survived (%d in a "
              "recompute)\n", faults, in_recompute);
  REQUIRE(faults == 3 * 2 * m);
  REQUIRE(in_recompute == 3 * m);
}

TEST_CASE("a bad target on a GPU: the kernel's own error at the step's end, naming its action",
          "[cuda][pipe][fault]") {
  // The cross-entropy kernel records the bad target in a device flag and the step reads it
  // with its losses at the end (Note [One read per step]): the same std::out_of_range as on
  // the CPU, failure() naming the F of that micro-batch on the last stage, deferred BatchNorm
  // discarded, and the next step as a fresh Pipe's.
  if (!gpu_available_or_skip()) return;
  const int m = 4;
  Generator g(1);
  GeneratorGuard guard(g);
  auto classifier = [] {
    return nn::Sequential(nn::Linear(16, 32), nn::BatchNorm1d(32), nn::ReLU(), nn::Linear(32, 5));
  };
  auto make = [&](nn::Sequential model) {
    return Pipe(std::move(model), {.balance = {3, 1},
                                   .devices = {gpu_or_shared(0), gpu_or_shared(1)},
                                   .chunks = m,
                                   .deferred_batch_norm = true});
  };
  Pipe pipe = make(classifier());
  Generator g2(1);
  GeneratorGuard guard2(g2);
  Pipe fresh = make(classifier());
  const Tensor x = randn({16, 16}, 11);
  std::vector<int64_t> labels = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0};
  const Tensor good = Tensor::from_vector(labels, Device::cpu(0));
  labels[9] = 7;  // micro-batch 2 (rows 8-11), its row 1
  const Tensor bad = Tensor::from_vector(labels, Device::cpu(0));
  const pipeline::LossFn ce = [](const Tensor& o, const Tensor& t) { return nn::cross_entropy(o, t); };
  const nn::NamedTensors stats = buffers_of(pipe.module());
  for (const std::string schedule : {"gpipe", "1f1b"}) {
    CAPTURE(schedule);
    REQUIRE_THROWS_MATCHES(
        pipe.train_step(x, bad, ce, {.schedule = named_schedule(pipe, x, schedule)}),
        std::out_of_range,
        Catch::Message("cross_entropy: target 7 at index 1 is outside [0, 5)"));
    const std::optional<Failure> f = pipe.last_failure();
    REQUIRE(f.has_value());
    CHECK(f->action.kind == ActionKind::kForward);
    CHECK(f->action.stage == 1);
    CHECK(f->action.microbatch == 2);
    CHECK(bitwise_equal(buffers_of(pipe.module()), stats));  // deferred BatchNorm: nothing committed
  }
  pipe.zero_grad();
  const StepResult r = pipe.train_step(x, good, ce, {.schedule = named_schedule(pipe, x, "1f1b")});
  const StepResult ref = fresh.train_step(x, good, ce,
                                          {.schedule = named_schedule(fresh, x, "1f1b")});
  CHECK(r.microbatch_losses == ref.microbatch_losses);
  CHECK(bitwise_equal(grads_of(pipe.module()), grads_of(fresh.module())));
}

TEST_CASE("a stage whose output lands on the other GPU: copied back to the stage's GPU",
          "[cuda][pipe]") {
  if (!gpus_available_or_skip(2)) return;
  // Stage 0 on cuda:0 ends with its output on cuda:1; stage 1 on cuda:1 ends on cuda:0. The
  // plain model on the CPU has the same layers with the moves as identities.
  auto net = [](bool away) {
    Generator g(9);
    GeneratorGuard guard(g);
    return nn::Sequential(nn::Linear(16, 32), nn::ReLU(),
                          MoveTo(away ? Device::cuda(1) : Device::cpu(0)), nn::Linear(32, 8),
                          MoveTo(away ? Device::cuda(0) : Device::cpu(0)));
  };
  const Checkpoint mode = GENERATE(Checkpoint::kAlways, Checkpoint::kNever);
  CAPTURE(pipeline::to_string(mode));
  nn::Sequential plain = net(false);
  Pipe pipe(net(true), {.balance = {3, 2},
                        .devices = {Device::cuda(0), Device::cuda(1)},
                        .chunks = 4,
                        .schedule = {.recompute = mode}});
  const Tensor x = randn({16, 16}, 10), y = randn({16, 8}, 11);
  Tensor ref_loss = nn::mse_loss(plain.forward(x), y);
  ref_loss.backward();

  Tensor out = pipe.forward(x);
  REQUIRE(out.device() == Device::cuda(1));  // the last stage's device (pipe.h)
  Tensor loss = mse(out, y);
  loss.backward();
  REQUIRE(std::abs(loss.item() - ref_loss.item()) <= 2e-5);
  REQUIRE(pipeline::testing::max_grad_diff(pipe.module(), plain) <= 2e-5);

  pipe.zero_grad();
  const StepResult r = pipe.train_step(x, y, mse, {.schedule = named_schedule(pipe, x, "1f1b")});
  REQUIRE(std::abs(r.loss - ref_loss.item()) <= 2e-5);
  REQUIRE(pipeline::testing::max_grad_diff(pipe.module(), plain) <= 2e-5);
}

}  // namespace
}  // namespace pipewright::testing
