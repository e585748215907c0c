// Channel: FIFO order, blocking pop, close wakes waiters, values pushed before close survive.
#include "pipeline/channel.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

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
