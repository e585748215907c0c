// InProcessTransport: one message per key, copies to the receiver's device, cancel wakes
// blocked receivers, recv reports when its message was sent.
#include "pipeline/transport.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "tensor/allocator.h"
#include "tensor/ops.h"

using namespace pipewright;
using namespace pipewright::pipeline;

TEST_CASE("the sender copies to the receiver's device; the message does not pin its memory") {
  InProcessTransport t;
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}, Device::cpu(20));
  t.send({0, 3, Direction::kActivation}, {x, Tensor()}, Device::cpu(21));
  std::vector<Tensor> got = t.recv({0, 3, Direction::kActivation});
  REQUIRE(got.size() == 2);
  REQUIRE(got[0].device() == Device::cpu(21));
  REQUIRE(ops::equal(got[0].to(Device::cpu(20)), x));
  REQUIRE_FALSE(got[1].defined());
  // The copy happened at send: the sender's tensor is not referenced by the transport.
  Tensor y = Tensor::ones({4}, {.device = Device::cpu(22)});
  const int64_t before = allocator_for(Device::cpu(22)).allocated();
  t.send({0, 4, Direction::kActivation}, {y}, Device::cpu(23));
  y = Tensor();
  REQUIRE(allocator_for(Device::cpu(22)).allocated() == before - 16);
  REQUIRE(t.recv({0, 4, Direction::kActivation})[0].device() == Device::cpu(23));
}

TEST_CASE("the same device shares the storage (no copy)") {
  InProcessTransport t;
  Tensor x = Tensor::ones({2, 3}, {.device = Device::cpu(20)});
  t.send({1, 0, Direction::kGradient}, {x}, Device::cpu(20));
  std::vector<Tensor> got = t.recv({1, 0, Direction::kGradient});
  REQUIRE(got[0].shares_storage(x));
}

TEST_CASE("keys are independent: direction, edge and micro-batch") {
  InProcessTransport t;
  t.send({0, 1, Direction::kActivation}, {Tensor::scalar(1.0)}, Device::cpu(0));
  t.send({0, 1, Direction::kGradient}, {Tensor::scalar(2.0)}, Device::cpu(0));
  t.send({1, 1, Direction::kActivation}, {Tensor::scalar(3.0)}, Device::cpu(0));
  t.send({0, 0, Direction::kActivation}, {Tensor::scalar(4.0)}, Device::cpu(0));
  REQUIRE(t.recv({0, 0, Direction::kActivation})[0].item() == 4.0);
  REQUIRE(t.recv({1, 1, Direction::kActivation})[0].item() == 3.0);
  REQUIRE(t.recv({0, 1, Direction::kGradient})[0].item() == 2.0);
  REQUIRE(t.recv({0, 1, Direction::kActivation})[0].item() == 1.0);
}

TEST_CASE("recv blocks until the sender sends") {
  InProcessTransport t;
  std::atomic<bool> returned{false};
  double got = 0;
  std::thread receiver([&] {
    got = t.recv({2, 5, Direction::kActivation})[0].item();
    returned = true;
  });
  // Nothing sent yet: the receiver must still be inside recv() (one that returned early, with
  // anything or by throwing, would show here), however long we look.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE_FALSE(returned.load());
  t.send({2, 5, Direction::kGradient}, {Tensor::scalar(1.0)}, Device::cpu(0));  // another key
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE_FALSE(returned.load());
  t.send({2, 5, Direction::kActivation}, {Tensor::scalar(9.0)}, Device::cpu(0));
  receiver.join();
  REQUIRE(returned.load());
  REQUIRE(got == 9.0);
}

TEST_CASE("recv reports how long after the call its message was sent, and waits as asked") {
  using std::chrono::milliseconds;
  InProcessTransport t;
  const MessageKey key{0, 0, Direction::kActivation};
  RecvTiming timing;
  timing.expected = milliseconds(1);  // due in 1 ms, sent after 30: the wait still ends well
  timing.lead = std::chrono::microseconds(150);
  std::atomic<std::chrono::steady_clock::time_point> started{};
  std::thread sender([&] {
    started = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(milliseconds(30));
    t.send(key, {Tensor::scalar(4.0)}, Device::cpu(0));
  });
  const auto called = std::chrono::steady_clock::now();
  CHECK(t.recv(key, timing)[0].item() == 4.0);
  sender.join();
  // Sent 30 ms after the sender started, which may be before recv was called (a slow or
  // loaded machine): measured from the call, less that head start (and a millisecond for the
  // call's own start).
  const auto head_start = std::max(called - started.load(), std::chrono::steady_clock::duration{});
  CHECK(timing.arrived >= milliseconds(30) - head_start - milliseconds(1));

  const MessageKey queued{0, 1, Direction::kActivation};
  t.send(queued, {Tensor::scalar(2.0)}, Device::cpu(0));
  RecvTiming there;
  CHECK(t.recv(queued, there)[0].item() == 2.0);
  CHECK(there.arrived <= RecvTiming::Duration::zero());  // it was already there
}

TEST_CASE("cancel wakes a blocked receiver with RunCancelled, and later receivers too") {
  InProcessTransport t;
  std::thread canceller([&] { t.cancel(); });
  REQUIRE_THROWS_AS(t.recv({0, 0, Direction::kActivation}), RunCancelled);
  canceller.join();
  t.send({0, 1, Direction::kActivation}, {Tensor::scalar(1.0)}, Device::cpu(0));  // dropped
  REQUIRE_THROWS_AS(t.recv({0, 1, Direction::kActivation}), RunCancelled);
}

TEST_CASE("message keys print what they name") {
  REQUIRE(MessageKey{1, 3, Direction::kGradient}.str() == "gradient edge 1 micro-batch 3");
}

TEST_CASE("a message key names its receiver: the stage after its arrival edge for an "
          "activation, the stage before it for a gradient") {
  REQUIRE(MessageKey{1, 3, Direction::kActivation}.receiver() == 2);
  REQUIRE(MessageKey{1, 3, Direction::kGradient}.receiver() == 1);
  for (int stage = 0; stage < 4; ++stage) {
    for (Direction d : {Direction::kActivation, Direction::kGradient}) {
      const MessageKey key = MessageKey::to(stage, 5, d, 2);
      REQUIRE(key.receiver() == stage);
      REQUIRE(key.microbatch == 5);
      REQUIRE(key.direction == d);
      REQUIRE(key.skip == 2);
    }
  }
  // The activation that stage 2 receives from stage 1 crosses edge 1; so does the gradient
  // stage 1 receives from stage 2.
  REQUIRE(MessageKey::to(2, 0, Direction::kActivation).arrival_edge == 1);
  REQUIRE(MessageKey::to(1, 0, Direction::kGradient).arrival_edge == 1);
}
