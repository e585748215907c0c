// Note [Worker CPUs] (worker.cc): by default every worker of a Pipe may run on all of the
// process's CPUs, with WorkerCpus::kPinned each on its own share when the shares fit, also
// when the thread that builds the Pipe was bound to one core (libgomp does that to the
// initial thread when OMP_PROC_BIND is set: the target worker_cpus_bound_test runs this file
// so); with kInherited on the builder's mask.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "nn/module.h"
#include "nn/sequential.h"
#include "pipeline/pipe.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace pipewright;

namespace {

// Identity that records the CPUs its forward's thread may run on.
class RecordCpus : public nn::Module {
 public:
  RecordCpus(std::shared_ptr<std::mutex> mutex, std::shared_ptr<std::set<std::vector<int>>> seen)
      : mutex_(std::move(mutex)), seen_(std::move(seen)) {}
  using nn::Module::forward;
  Tensor forward(const Tensor& x) override {
    std::lock_guard<std::mutex> lock(*mutex_);
    seen_->insert(current_thread_cpus());
    return x;
  }
  std::string str() const override { return "RecordCpus"; }

 private:
  std::shared_ptr<std::mutex> mutex_;
  std::shared_ptr<std::set<std::vector<int>>> seen_;
};

struct Recorded {
  std::set<std::vector<int>> stage0, stage1;
};

Recorded run_two_stages(pipeline::WorkerCpus policy) {
  auto mutex = std::make_shared<std::mutex>();
  auto seen0 = std::make_shared<std::set<std::vector<int>>>();
  auto seen1 = std::make_shared<std::set<std::vector<int>>>();
  nn::Sequential model;
  model.push_back(RecordCpus(mutex, seen0));
  model.push_back(RecordCpus(mutex, seen1));
  pipeline::Pipe pipe(std::move(model), {.balance = {1, 1},
                                         .devices = {Device::cpu(0), Device::cpu(1)},
                                         .chunks = 4,
                                         .threads_per_worker = 1,
                                         .worker_cpus = policy});
  pipe.forward(Tensor::ones({8, 3}));
  return {*seen0, *seen1};
}

}  // namespace

TEST_CASE("two workers with one thread each: on all CPUs, pinned on two different ones, or inherited") {
  const std::vector<int>& cpus = process_cpus();
  const char* bind = std::getenv("OMP_PROC_BIND");
  INFO("OMP_PROC_BIND=" << (bind ? bind : "(unset)") << ", process CPUs " << cpus.size()
                        << ", this thread's " << current_thread_cpus().size());
  if (cpus.size() < 2) {
    WARN("one CPU: nothing to share out");
    return;
  }
  // The default: both on every CPU of the process (under OMP_PROC_BIND=true too, though this
  // thread may run on one).
  const Recorded shared = run_two_stages(pipeline::PipeOptions{}.worker_cpus);
  CHECK(shared.stage0 == std::set<std::vector<int>>{cpus});
  CHECK(shared.stage1 == std::set<std::vector<int>>{cpus});

  const Recorded pinned = run_two_stages(pipeline::WorkerCpus::kPinned);
  CHECK(pinned.stage0 == std::set<std::vector<int>>{{cpus[0]}});
  CHECK(pinned.stage1 == std::set<std::vector<int>>{{cpus[1]}});

  // kInherited: both keep this thread's mask (under OMP_PROC_BIND=true: one core, the
  // collapse the other two prevent).
  const Recorded inherited = run_two_stages(pipeline::WorkerCpus::kInherited);
  CHECK(inherited.stage0 == std::set<std::vector<int>>{current_thread_cpus()});
  CHECK(inherited.stage1 == std::set<std::vector<int>>{current_thread_cpus()});
  if (std::getenv("EXPECT_BOUND") != nullptr) {  // set by worker_cpus_bound_test's BUILD rule
    REQUIRE(bind != nullptr);
    CHECK(std::string(bind) == "true");
#ifdef _OPENMP
    // The scenario is real: libgomp bound this (initial) thread to one CPU, yet the process's
    // CPUs are all of the places.
    CHECK(current_thread_cpus().size() == 1);
#endif
  }
}

TEST_CASE("more workers than CPUs: every worker may run on every CPU") {
  const std::vector<int>& cpus = process_cpus();
  auto mutex = std::make_shared<std::mutex>();
  std::vector<std::shared_ptr<std::set<std::vector<int>>>> seen;
  nn::Sequential model;
  const int workers = static_cast<int>(cpus.size()) + 1;
  std::vector<Device> devices;
  for (int w = 0; w < workers; ++w) {
    seen.push_back(std::make_shared<std::set<std::vector<int>>>());
    model.push_back(RecordCpus(mutex, seen.back()));
    devices.push_back(Device::cpu(w));
  }
  pipeline::Pipe pipe(std::move(model), {.balance = std::vector<int>(workers, 1),
                                         .devices = devices,
                                         .chunks = 2});
  pipe.forward(Tensor::ones({4, 3}));
  for (const auto& s : seen) CHECK(*s == std::set<std::vector<int>>{cpus});
}
