// Worker: jobs run in order on one persistent thread with the worker's generator and thread
// budget; destruction drains and joins.
#include "pipeline/worker.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tensor/threads.h"

using namespace pipewright;
using namespace pipewright::pipeline;

TEST_CASE("jobs run in submission order on one thread") {
  std::vector<int> order;
  std::vector<std::thread::id> ids;
  {
    Worker w(0, 1, 7);
    for (int i = 0; i < 5; ++i) {
      w.submit([&, i] {
        order.push_back(i);
        ids.push_back(std::this_thread::get_id());
      });
    }
  }  // ~Worker runs the queued jobs, then joins
  REQUIRE(order == std::vector<int>{0, 1, 2, 3, 4});
  for (auto id : ids) REQUIRE(id == ids[0]);
  REQUIRE(ids[0] != std::this_thread::get_id());
}

TEST_CASE("a job sees the worker's generator and intra-op budget") {
  Worker w(3, 1, 1234);
  Generator* seen = nullptr;
  int threads = 0;
  Countdown done(1);
  w.submit([&] {
    seen = &current_generator();
    threads = intra_op_threads();
    done.done();
  });
  done.wait();
  REQUIRE(seen == &w.generator());
  REQUIRE(threads == 1);
  REQUIRE(w.generator().seed() == 1234);
}

TEST_CASE("a throwing job does not kill the worker, and its exception is kept") {
  Worker w(0, 1, 0);
  REQUIRE(w.escaped() == nullptr);
  std::promise<void> ran;
  std::future<void> next = ran.get_future();
  w.submit([] { throw std::runtime_error("boom"); });
  w.submit([] { throw std::logic_error("second"); });
  w.submit([&] { ran.set_value(); });
  // Bounded: a dead worker fails here instead of hanging until the test's timeout.
  REQUIRE(next.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  const std::exception_ptr e = w.escaped();
  REQUIRE(e != nullptr);
  REQUIRE_THROWS_AS(std::rethrow_exception(e), std::runtime_error);  // the first one
  REQUIRE_THROWS_WITH(std::rethrow_exception(e), "boom");
}

TEST_CASE("countdown waits for every worker") {
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < 3; ++i) workers.push_back(std::make_unique<Worker>(i, 1, i));
  std::atomic<int> ran{0};
  auto done = std::make_shared<Countdown>(3);
  for (auto& w : workers) {
    w->submit([&ran, done] {
      ++ran;
      done->done();
    });
  }
  done->wait();
  REQUIRE(ran == 3);
}

TEST_CASE("countdown keeps the first exception a job hands it") {
  Countdown c(3);
  c.done();
  c.done(std::make_exception_ptr(std::runtime_error("first")));
  c.done(std::make_exception_ptr(std::logic_error("second")));
  c.wait();
  REQUIRE(c.error() != nullptr);
  REQUIRE_THROWS_AS(std::rethrow_exception(c.error()), std::runtime_error);
  REQUIRE_THROWS_WITH(std::rethrow_exception(c.error()), "first");
  Countdown clean(1);
  clean.done();
  clean.wait();
  REQUIRE(clean.error() == nullptr);
}

TEST_CASE("mix_seed gives distinct seeds per worker") {
  REQUIRE(mix_seed(0, 0) != mix_seed(0, 1));
  REQUIRE(mix_seed(0, 1) != mix_seed(1, 1));
  REQUIRE(mix_seed(5, 2) == mix_seed(5, 2));
}

TEST_CASE("a worker runs on the CPUs it is given, else on the inherited ones") {
  const std::vector<int>& cpus = process_cpus();
  std::vector<int> pinned, inherited;
  Countdown done(2);
  Worker one(0, 1, 0, Device::cpu(0), {cpus.back()});
  Worker free(1, 1, 0);
  one.submit([&] {
    pinned = current_thread_cpus();
    done.done();
  });
  free.submit([&] {
    inherited = current_thread_cpus();
    done.done();
  });
  done.wait();
  CHECK(one.cpus() == std::vector<int>{cpus.back()});
  CHECK(pinned == std::vector<int>{cpus.back()});
  CHECK(free.cpus().empty());
  CHECK(inherited == current_thread_cpus());  // this thread's mask
}
