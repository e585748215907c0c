// Soak (not in CI): many pipelined training steps across every schedule with
// failures injected at random actions (Pipe's fault hook) and, now and then, a failed
// allocation (CpuAllocator::fail_allocation_after); after each failure the next step must
// succeed. Reports steps/s, failures survived, and max RSS and allocator reserved bytes per
// interval: both must stay flat (no leak). Results in docs/BENCHMARKS.md ("Reliability").
//   tools/bazel run //bench:soak_bench -- 10000
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "pipeline/pipe.h"
#include "pipeline/pipe_test_access.h"
#include "tensor/allocator.h"
#include "tensor/cpu_allocator.h"
#include "tensor/generator.h"

using namespace pipewright;
using namespace pipewright::pipeline;

namespace {

struct InjectedFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

long rss_kb(const char* field) {  // VmRSS or VmHWM of this process, in KiB
  std::ifstream in("/proc/self/status");
  std::string key;
  long value = 0;
  while (in >> key) {
    if (key == field) {
      in >> value;
      return value;
    }
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 10000;
  constexpr int kWorkers = 3;
  Generator g(1);
  GeneratorGuard guard(g);
  nn::Sequential model(nn::Linear(32, 64), nn::BatchNorm1d(64), nn::ReLU(), nn::Linear(64, 64),
                       nn::Tanh(), nn::Linear(64, 10));
  Pipe pipe(std::move(model), {.balance = {2, 2, 2},
                               .devices = {Device::cpu(0), Device::cpu(1), Device::cpu(2)},
                               .chunks = 4,
                               .deferred_batch_norm = true});
  nn::SGD opt(pipe.parameters(), {.lr = 0.01, .momentum = 0.9});
  const LossFn loss = [](const Tensor& out, const Tensor& t) {
    return nn::mse_loss(out, t.to(out.device()));
  };
  Tensor x = Tensor::empty({32, 32}), y = Tensor::empty({32, 10});
  g.normal_(x);
  g.normal_(y);

  const char* schedules[] = {"gpipe", "1f1b", "zb-h1", "zb-h2"};
  std::mt19937 rng(17);
  int faults = 0, alloc_failures = 0, ok = 0;
  bool armed = false;
  int fault_worker = 0, fault_index = 0;
  PipeTestAccess::set_fault_hook(pipe, [&](int worker, int index, const Action&) {
    if (armed && worker == fault_worker && index == fault_index) {
      throw InjectedFault("soak fault");
    }
  });
  std::printf("%8s %10s %8s %8s %10s %10s %14s\n", "steps", "steps/s", "faults", "allocF",
              "rss_MiB", "hwm_MiB", "reserved_B");
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  for (int s = 1; s <= steps; ++s) {
    const char* schedule = schedules[s % 4];
    armed = std::uniform_int_distribution<int>(0, 9)(rng) == 0;  // 10% of steps
    fault_worker = std::uniform_int_distribution<int>(0, kWorkers - 1)(rng);
    fault_index = std::uniform_int_distribution<int>(0, 15)(rng);
    const bool alloc_fail = !armed && std::uniform_int_distribution<int>(0, 49)(rng) == 0;
    auto& cpu = dynamic_cast<CpuAllocator&>(allocator_for(Device::cpu(s % kWorkers)));
    if (alloc_fail) cpu.fail_allocation_after(std::uniform_int_distribution<int>(0, 40)(rng));
    opt.zero_grad();
    try {
      pipe.train_step(x, y, loss, {.schedule = pipe.schedule_for(4,
                                                                 schedule)});  // 32 rows, 4 chunks
      opt.step();
      ++ok;
    } catch (const InjectedFault&) {
      ++faults;
    } catch (const std::bad_alloc&) {
      ++alloc_failures;
    }
    cpu.fail_allocation_after(-1);
    armed = false;
    if (s % 1000 == 0 || s == steps) {
      const auto now = std::chrono::steady_clock::now();
      const double secs = std::chrono::duration<double>(now - last).count();
      last = now;
      int64_t reserved = 0;
      for (int d = 0; d < kWorkers; ++d) reserved += allocator_for(Device::cpu(d)).reserved();
      std::printf("%8d %10.0f %8d %8d %10.1f %10.1f %14lld\n", s,
                  (s % 1000 ? s % 1000 : 1000) / secs, faults, alloc_failures,
                  rss_kb("VmRSS:") / 1024.0, rss_kb("VmHWM:") / 1024.0,
                  static_cast<long long>(reserved));
      std::fflush(stdout);
    }
  }
  const double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "%d steps in %.1f s (%.0f steps/s): %d succeeded, %d injected faults and %d "
      "allocation failures survived, 0 hangs\n",
      steps, total, steps / total, ok, faults, alloc_failures);
  return 0;
}
