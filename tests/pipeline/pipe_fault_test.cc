// Fault injection (issue 17): an exception at any (worker, action index) of forward(), of its
// backward and of train_step, over schedules × checkpoint modes × p ∈ {2, 3, 4} ×
// m ∈ {1, 3, 8}; an allocation failure in the CPU allocator; a NaN loss. Each time: the
// exception reaches the caller unchanged, no thread hangs (a watchdog aborts the test), the
// other workers start at most p - 1 actions after the failure, Pipe::last_failure() names the
// action, allocated bytes return to their pre-step value, deferred BatchNorm statistics are
// untouched, and the Pipe's next step equals a fresh Pipe's bit for bit.
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

#include "autograd/elementwise.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule/generators.h"
#include "tensor/allocator.h"
#include "tensor/cpu_allocator.h"
#include "tensor/generator.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

namespace {

struct InjectedFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Aborts the whole test binary when a case takes longer than `seconds`: a hang is a failure,
// never a pass (the limit is far above any case's run time; it is not a performance bound).
class Watchdog {
 public:
  Watchdog(std::string what, int seconds) : what_(std::move(what)) {
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) {
        std::fprintf(stderr, "HANG: %s did not finish within %d s\n", what_.c_str(), seconds);
        std::abort();
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// small_mlp with a BatchNorm1d after the first Linear: 6 children.
nn::Sequential model(uint64_t seed) {
  Generator g(seed);
  GeneratorGuard guard(g);
  return nn::Sequential(nn::Linear(4, 8), nn::BatchNorm1d(8), nn::ReLU(), nn::Linear(8, 8),
                        nn::Tanh(), nn::Linear(8, 3));
}

std::vector<int> balance_for(int p) {
  if (p == 2) return {3, 3};
  if (p == 3) return {2, 2, 2};
  return {2, 2, 1, 1};
}

// m micro-batches of a 2m-row batch (BatchNorm needs two rows).
Pipe make_pipe(int p, Checkpoint ckpt, int m = 8) {
  return Pipe(model(1), {.balance = balance_for(p),
                         .devices = cpus(0, p),
                         .chunks = m,
                         .checkpoint = ckpt,
                         .deferred_batch_norm = true});
}

Tensor mse(const Tensor& out, const Tensor& t) { return nn::mse_loss(out, t.to(out.device())); }

std::string bytes_of(const Tensor& t) {
  const Tensor c = t.to(Device::cpu(0)).contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

// Every buffer (BatchNorm running statistics) of the model, as bytes.
std::vector<std::string> buffers(const Pipe& pipe) {
  std::vector<std::string> out;
  for (const auto& [name, t] : pipe.module().named_buffers()) out.push_back(bytes_of(t));
  return out;
}

std::vector<std::string> grads(const Pipe& pipe) {
  std::vector<std::string> out;
  for (const Tensor& p : pipe.parameters())
    out.push_back(p.grad().defined() ? bytes_of(p.grad()) : "");
  return out;
}

std::vector<int64_t> allocated(int p) {
  std::vector<int64_t> out;
  for (int d = 0; d < p; ++d) out.push_back(allocator_for(Device::cpu(d)).allocated());
  return out;
}

std::string fault_message(int w, int i) {
  return "injected fault at worker " + std::to_string(w) + ", action " + std::to_string(i);
}

// Arms `pipe` to throw InjectedFault at (w, i); returns a flag that is set when it fired.
std::shared_ptr<std::atomic<bool>> arm(Pipe& pipe, int w, int i) {
  auto fired = std::make_shared<std::atomic<bool>>(false);
  pipe.set_fault_hook_for_testing([w, i, fired](int worker, int index, const Action&) {
    if (worker == w && index == i) {
      fired->store(true);
      throw InjectedFault(fault_message(w, i));
    }
  });
  return fired;
}

// Checks last_failure() after an injected fault at (w, i) of `list`.
void require_failure(const Pipe& pipe, int w, int i, const std::vector<Action>& list, int p) {
  const std::optional<Failure> f = pipe.last_failure();
  REQUIRE(f.has_value());
  REQUIRE(f->worker == w);
  REQUIRE(f->action_index == i);
  REQUIRE(f->action == list.at(static_cast<size_t>(i)));
  REQUIRE(f->what == fault_message(w, i));
  REQUIRE(f->actions_after >= 0);
  REQUIRE(f->actions_after <= p - 1);  // each other worker at most the action it had begun
  REQUIRE_THAT(f->str(), Catch::Contains("micro-batch " + std::to_string(list[i].microbatch)));
}

struct Reference {
  StepResult result;
  std::vector<std::string> grads, buffers;
};

}  // namespace

TEST_CASE("a fault at any action of train_step: matrix of schedules, modes, p and m") {
  const Tensor x = randn({16, 4}, 3), y = randn({16, 3}, 4);
  int configs = 0, faults = 0, not_applicable = 0;
  for (const std::string schedule : {"gpipe", "1f1b", "zb-h1", "zb-h2"}) {
    for (const Checkpoint ckpt :
         {Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever}) {
      for (const int p : {2, 3, 4}) {
        for (const int m : {1, 3, 8}) {
          CAPTURE(schedule, to_string(ckpt), p, m);
          Pipe fresh = make_pipe(p, ckpt, m);
          const Tensor xm = x.slice(0, 2 * m), ym = y.slice(0, 2 * m);  // m micro-batches
          Reference ref;
          try {
            ref.result = fresh.train_step(xm, ym, mse, schedule);
          } catch (const std::invalid_argument&) {
            ++not_applicable;  // e.g. a schedule that needs m >= p; counted, never a pass
            continue;
          }
          ++configs;
          ref.grads = grads(fresh);
          ref.buffers = buffers(fresh);
          const Schedule& s = ref.result.schedule;

          // Positions: all of them for one configuration, else each worker's first, last and
          // one in between (seeded).
          const bool sweep =
              schedule == "1f1b" && ckpt == Checkpoint::kExceptLast && p == 3 && m == 3;
          std::mt19937 rng(static_cast<unsigned>(p * 100 + m * 10 + static_cast<int>(ckpt)));
          std::vector<std::pair<int, int>> positions;
          for (int w = 0; w < p; ++w) {
            const int n = static_cast<int>(s.actions[w].size());
            if (sweep) {
              for (int i = 0; i < n; ++i) positions.emplace_back(w, i);
            } else {
              positions.emplace_back(w, 0);
              positions.emplace_back(w, n - 1);
              positions.emplace_back(w, std::uniform_int_distribution<int>(0, n - 1)(rng));
            }
          }

          Pipe pipe = make_pipe(p, ckpt, m);
          bool first = true;
          for (const auto& [w, i] : positions) {
            CAPTURE(w, i);
            Watchdog watchdog("train_step with a fault at worker " + std::to_string(w) +
                                  " action " + std::to_string(i),
                              120);
            pipe.zero_grad();
            const std::vector<int64_t> before = allocated(p);
            const std::vector<std::string> stats = buffers(pipe);
            auto fired = arm(pipe, w, i);
            try {
              pipe.train_step(xm, ym, mse, schedule);
              FAIL("the injected fault did not reach the caller");
            } catch (const InjectedFault& e) {
              REQUIRE(std::string(e.what()) == fault_message(w, i));
            }
            REQUIRE(fired->load());
            pipe.set_fault_hook_for_testing(nullptr);
            ++faults;
            require_failure(pipe, w, i, s.actions[w], p);
            REQUIRE(buffers(pipe) == stats);  // deferred BatchNorm: nothing committed
            pipe.zero_grad();
            REQUIRE(allocated(p) == before);

            // The next step is a fresh Pipe's step, bit for bit.
            const StepResult r = pipe.train_step(xm, ym, mse, schedule);
            REQUIRE(r.microbatch_losses == ref.result.microbatch_losses);
            REQUIRE(grads(pipe) == ref.grads);
            if (first) REQUIRE(buffers(pipe) == ref.buffers);  // its first committed step
            REQUIRE_FALSE(pipe.last_failure().has_value());
            first = false;
          }
        }
      }
    }
  }
  std::printf(
      "train_step fault matrix: %d configurations, %d faults injected and survived, "
      "%d configurations not applicable\n",
      configs, faults, not_applicable);
  REQUIRE(configs >= 4 * 3 * 9 / 2);  // see the printed count of those not applicable
}

TEST_CASE("a fault in forward() or in its backward: matrix of modes, p and m") {
  const Tensor x = randn({16, 4}, 5), y = randn({16, 3}, 6);
  int faults = 0;
  for (const Checkpoint ckpt : {Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever}) {
    for (const int p : {2, 3, 4}) {
      for (const int m : {1, 3, 8}) {
        CAPTURE(to_string(ckpt), p, m);
        const Tensor xm = x.slice(0, 2 * m), ym = y.slice(0, 2 * m);
        Pipe fresh = make_pipe(p, ckpt, m);
        const Tensor ref_out = fresh.forward(xm);
        mse(ref_out, ym).backward();
        const std::vector<std::string> ref_grads = grads(fresh);

        Pipe pipe = make_pipe(p, ckpt, m);
        for (const bool in_backward : {false, true}) {
          for (int w = 0; w < p; ++w) {
            for (const int i : {0, m - 1, 2 * m - 1}) {
              CAPTURE(in_backward, w, i);
              Watchdog watchdog("forward/backward with a fault", 120);
              pipe.zero_grad();
              const std::vector<int64_t> before = allocated(p);
              std::vector<std::string> stats = buffers(pipe);
              std::shared_ptr<std::atomic<bool>> fired;
              try {
                if (!in_backward) fired = arm(pipe, w, i);
                Tensor out = pipe.forward(xm);
                pipe.set_fault_hook_for_testing(nullptr);
                if (!in_backward) continue;  // forward's list is shorter than i: not a case
                stats = buffers(pipe);       // forward committed its statistics
                fired = arm(pipe, w, i);
                mse(out, ym).backward();
              } catch (const InjectedFault& e) {
                REQUIRE(std::string(e.what()) == fault_message(w, i));
              }
              pipe.set_fault_hook_for_testing(nullptr);
              if (!fired->load()) continue;  // the worker's list is shorter than i
              ++faults;
              const std::optional<Failure> f = pipe.last_failure();
              REQUIRE(f.has_value());
              REQUIRE((f->worker == w && f->action_index == i));
              REQUIRE(f->actions_after <= p - 1);
              REQUIRE(buffers(pipe) == stats);
              pipe.zero_grad();
              REQUIRE(allocated(p) == before);

              const Tensor out = pipe.forward(xm);
              REQUIRE(bytes_of(out) == bytes_of(ref_out));
              mse(out, ym).backward();
              REQUIRE(grads(pipe) == ref_grads);
            }
          }
        }
      }
    }
  }
  std::printf("forward/backward fault matrix: %d faults injected and survived\n", faults);
  REQUIRE(faults >= 3 * 9 * 2);
}

TEST_CASE("an allocation failure in the CPU allocator during train_step") {
  const Tensor x = randn({16, 4}, 7), y = randn({16, 3}, 8);
  for (const int p : {2, 3}) {
    Pipe fresh = make_pipe(p, Checkpoint::kExceptLast);
    const StepResult ref = fresh.train_step(x, y, mse, "1f1b");
    const std::vector<std::string> ref_grads = grads(fresh);
    Pipe pipe = make_pipe(p, Checkpoint::kExceptLast);
    int failures = 0;
    for (int device = 0; device < p; ++device) {
      auto* cpu = dynamic_cast<CpuAllocator*>(&allocator_for(Device::cpu(device)));
      REQUIRE(cpu != nullptr);
      for (const int after : {0, 3, 17, 60, 150}) {
        CAPTURE(p, device, after);
        Watchdog watchdog("train_step with an allocation failure", 120);
        pipe.zero_grad();
        const std::vector<int64_t> before = allocated(p);
        const std::vector<std::string> stats = buffers(pipe);
        cpu->fail_allocation_after(after);
        bool failed = false;
        try {
          pipe.train_step(x, y, mse, "1f1b");
        } catch (const std::bad_alloc&) {
          failed = true;
        }
        cpu->fail_allocation_after(-1);
        pipe.zero_grad();
        REQUIRE(allocated(p) == before);
        if (!failed) continue;  // the step made fewer allocations on this device
        ++failures;
        REQUIRE(buffers(pipe) == stats);
        const StepResult r = pipe.train_step(x, y, mse, "1f1b");
        REQUIRE(r.microbatch_losses == ref.microbatch_losses);
        REQUIRE(grads(pipe) == ref_grads);
      }
    }
    std::printf("allocation failures, p = %d: %d injected and survived\n", p, failures);
    REQUIRE(failures >= p * 3);
  }
}

TEST_CASE("a NaN or infinite loss stops the step with an error naming the micro-batch") {
  for (const double bad :
       {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    Pipe pipe = make_pipe(2, Checkpoint::kNever);
    const Tensor x = randn({16, 4}, 9), y = randn({16, 3}, 10);
    const std::vector<std::string> stats = buffers(pipe);
    const LossFn loss = [bad](const Tensor& out, const Tensor& t) {
      return autograd::mul(mse(out, t), bad);
    };
    REQUIRE_THROWS_MATCHES(pipe.train_step(x, y, loss, "1f1b"), std::domain_error,
                           Catch::Message(std::string("train_step: the loss of micro-batch 0 is ") +
                                          (std::isnan(bad) ? "nan" : "inf") +
                                          " (not finite); the step is abandoned before its "
                                          "backward"));
    REQUIRE(buffers(pipe) == stats);
    const std::optional<Failure> f = pipe.last_failure();
    REQUIRE(f.has_value());
    REQUIRE(f->action.kind == ActionKind::kForward);
    REQUIRE(f->action.stage == 1);
    REQUIRE(f->action.microbatch == 0);
  }
}
