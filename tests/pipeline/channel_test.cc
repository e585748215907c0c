// Channel: FIFO order, blocking pop, close wakes waiters, values pushed before close survive,
// and pop(expected, lead) waits for a value due at a known time.
#include "pipeline/channel.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <utility>

#include <time.h>

using pipewright::pipeline::Channel;

TEST_CASE("channel delivers in FIFO order") {
  Channel<int> c;
  c.push(1);
  c.push(2);
  REQUIRE(c.pop() == 1);
  REQUIRE(c.pop() == 2);
}

TEST_CASE("pop blocks until a value arrives from another thread") {
  Channel<int> c;
  std::atomic<bool> returned{false};
  std::optional<int> got;
  std::thread consumer([&] {
    got = c.pop();
    returned = true;
  });
  // Nothing pushed yet: the consumer must still be inside pop() (a pop that returned without
  // a value would show here), however long we look.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE_FALSE(returned.load());
  c.push(42);
  consumer.join();
  REQUIRE(got == 42);
}

TEST_CASE("close wakes a blocked pop with nullopt and refuses later pushes") {
  Channel<int> c;
  std::thread closer([&] { c.close(); });
  REQUIRE_FALSE(c.pop().has_value());
  closer.join();
  REQUIRE(c.closed());
  REQUIRE_FALSE(c.push(3));
  REQUIRE_FALSE(c.pop().has_value());
}

TEST_CASE("values pushed before close are still delivered") {
  Channel<int> c;
  c.push(7);
  c.close();
  REQUIRE(c.pop() == 7);
  REQUIRE_FALSE(c.pop().has_value());
}

TEST_CASE("clear drops queued values") {
  Channel<int> c;
  c.push(1);
  c.clear();
  c.close();
  REQUIRE_FALSE(c.pop().has_value());
}

// Note [Waiting for a message due soon]: pop(expected, lead) sleeps until lead before the
// value is due, spins until lead after, then sleeps until it comes.
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

// The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
Clock::duration thread_cpu_time() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
}

// pop(expected, lead) on a value pushed `after` from now by another thread; returns what it
// got and whether it had returned before the push.
std::pair<std::optional<int>, bool> pop_pushed_after(Clock::duration after,
                                                     Clock::duration expected) {
  Channel<int> c;
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    std::this_thread::sleep_for(after);
    pushed = true;
    c.push(5);
  });
  const std::optional<int> got = c.pop(expected, microseconds(150));
  const bool early = !pushed.load();
  producer.join();
  return {got, early};
}

}  // namespace

TEST_CASE("a pop expecting its value gets it whether it comes early, on time or late") {
  for (const auto& [after, expected] :
       {std::pair<Clock::duration, Clock::duration>{milliseconds(1), milliseconds(20)},  // early
        {milliseconds(5), milliseconds(5)},                                              // on time
        {milliseconds(30), milliseconds(2)},                                             // late
        {milliseconds(2), Clock::duration(-1)}}) {  // unknown: pop()
    const auto [got, early] = pop_pushed_after(after, expected);
    CHECK(got == 5);
    CHECK_FALSE(early);  // it waited for the push, however late
  }
}

TEST_CASE("a pop expecting its value returns a queued one at once, and nullopt once closed") {
  Channel<int> c;
  c.push(1);
  c.push(2);
  CHECK(c.pop(milliseconds(50), microseconds(150)) == 1);  // not held until it is "due"
  CHECK(c.pop(Clock::duration::zero(), microseconds(150)) == 2);
  std::thread closer([&] {
    std::this_thread::sleep_for(milliseconds(5));
    c.close();
  });
  CHECK_FALSE(c.pop(milliseconds(5), microseconds(150)).has_value());  // closed while it waits
  closer.join();
}

TEST_CASE("a pop whose value is late spins only around the time it was due, then sleeps") {
  // Due in 1 ms, comes after 300 ms: the spin covers 0.85-1.15 ms, the rest is asleep. A pop
  // that kept spinning would burn most of the 300 ms of CPU time.
  Channel<int> c;
  std::thread producer([&] {
    std::this_thread::sleep_for(milliseconds(300));
    c.push(9);
  });
  const Clock::duration cpu_before = thread_cpu_time();
  const std::optional<int> got = c.pop(milliseconds(1), microseconds(150));
  const Clock::duration cpu = thread_cpu_time() - cpu_before;
  producer.join();
  CHECK(got == 9);
  CHECK(cpu < milliseconds(60));
}
