// Trace: bubble arithmetic on hand-made events, a Chrome trace that parses, and a replayed
// schedule as a Trace.
#include "pipeline/trace.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline/schedule/generators.h"

using namespace pipewright::pipeline;

namespace {
TraceEvent ev(int worker, ActionKind kind, int mb, double start, double end) {
  return TraceEvent{worker, worker, kind, mb, start, end};
}
}  // namespace

TEST_CASE("bubble fraction = idle / (workers x wall)") {
  // GPipe p = 2, m = 2, tF = 1, tB = 2:
  //   worker 0  F0 F1 .  .  .  .  B1 B1 B0 B0        wall 0..10
  //   worker 1  .  F0 F1 B1 B1 B0 B0 .  .  .
  Trace t(2);
  t.add(ev(0, ActionKind::kForward, 0, 0, 1));
  t.add(ev(0, ActionKind::kForward, 1, 1, 2));
  t.add(ev(1, ActionKind::kForward, 0, 1, 2));
  t.add(ev(1, ActionKind::kForward, 1, 2, 3));
  t.add(ev(1, ActionKind::kBackward, 1, 3, 5));
  t.add(ev(1, ActionKind::kBackward, 0, 5, 7));
  t.add(ev(0, ActionKind::kBackward, 1, 6, 8));
  t.add(ev(0, ActionKind::kBackward, 0, 8, 10));
  REQUIRE(t.wall_us() == 10);
  REQUIRE(t.busy_us(0) == 6);
  REQUIRE(t.busy_us(1) == 6);
  // idle 4 + 4 over 2 x 10 = 0.4; theory (p-1)/(m+p-1) = 1/3 assumes back-to-back F and B.
  REQUIRE(t.bubble_fraction() == Approx(0.4));
  REQUIRE(theoretical_bubble(2, 2) == Approx(1.0 / 3));
  REQUIRE(theoretical_bubble(2, 8) == Approx(1.0 / 9));
}

TEST_CASE("an empty trace has no bubble") {
  Trace t(4);
  REQUIRE(t.wall_us() == 0);
  REQUIRE(t.bubble_fraction() == 0);
}

TEST_CASE("chrome trace JSON has complete events per worker") {
  Trace t(2);
  t.add(TraceEvent{1, 3, ActionKind::kRecompute, 2, 10.5, 12.0});
  nlohmann::json doc = nlohmann::json::parse(t.to_chrome_json());
  const auto& events = doc.at("traceEvents");
  int complete = 0;
  for (const auto& e : events) {
    if (e.at("ph") == "X") {
      ++complete;
      REQUIRE(e.at("name") == "R2");
      REQUIRE(e.at("cat") == "recompute");
      REQUIRE(e.at("pid") == 1);
      REQUIRE(e.at("tid") == 3);
      REQUIRE(e.at("ts").get<double>() == 10.5);
      REQUIRE(e.at("dur").get<double>() == 1.5);
      REQUIRE(e.at("args").at("microbatch") == 2);
    }
  }
  REQUIRE(complete == 1);
  // + one process_name record per worker, one thread_name per (worker, stage) with events.
  REQUIRE(events.size() == 4);
  REQUIRE(events.at(2) == nlohmann::json::parse(
                              R"({"name": "thread_name", "ph": "M", "pid": 1, "tid": 3,
                                  "args": {"name": "stage 3"}})"));
  REQUIRE(doc.at("otherData").at("simulated") == false);
}

TEST_CASE("write_chrome_json reports an unwritable path") {
  Trace t(1);
  REQUIRE_THROWS_WITH(t.write_chrome_json("/nonexistent-dir/trace.json"),
                      Catch::Contains("/nonexistent-dir/trace.json"));
}

TEST_CASE("sends are complete events on their worker's sends thread, outside busy time") {
  Trace t(2);
  t.add(TraceEvent{0, 0, ActionKind::kForward, 1, 0.0, 10.0});
  TraceTransfer send;
  send.worker = 0;
  send.from_stage = 0;
  send.to_stage = 3;
  send.microbatch = 1;
  send.skip = "'a'";
  send.bytes = 96;
  send.start_us = 8.0;
  send.end_us = 9.5;
  t.add(send);
  REQUIRE(t.busy_us(0) == 10.0);
  REQUIRE(send.name() == "portal 'a' 0->3 mb 1");
  send.gradient = true;
  REQUIRE(send.name() == "portal grad 'a' 0->3 mb 1");
  send.skip.clear();
  REQUIRE(send.name() == "grad 0->3 mb 1");
  nlohmann::json doc = nlohmann::json::parse(t.to_chrome_json());
  int sends = 0;
  std::vector<std::string> names;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("name") == "thread_name") names.push_back(e.at("args").at("name"));
    if (e.at("ph") == "X" && e.at("cat") == "portal") {
      ++sends;
      REQUIRE(e.at("name") == "portal 'a' 0->3 mb 1");
      REQUIRE(e.at("pid") == 0);
      REQUIRE(e.at("dur").get<double>() == 1.5);
      REQUIRE(e.at("args").at("bytes") == 96);
    }
  }
  REQUIRE(sends == 1);
  // Worker 0's stage 0 and its sends; worker 1 has no events and sent nothing.
  REQUIRE(names == std::vector<std::string>{"stage 0", "sends"});
}

TEST_CASE("a simulated schedule: one complete event per action at its simulated time") {
  // GPipe p = 2, m = 1, tF = 1, tB = 2 (replay.h): F0@0 0-1, F0@1 1-2, B0@1 2-4, B0@0 4-6.
  const Trace t = Trace::replayed(gpipe(2, 1), Costs::unit(1, 2), 10.0);
  REQUIRE(t.num_workers() == 2);
  REQUIRE(t.events().size() == 4);
  REQUIRE(t.wall_us() == 60);
  REQUIRE(t.busy_us(0) == 30);
  REQUIRE(t.bubble_fraction() == Approx(0.5));
  nlohmann::json doc = nlohmann::json::parse(t.to_chrome_json());
  int complete = 0;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    ++complete;
    if (e.at("name") == "B0" && e.at("pid") == 0) {
      // B0 on worker 0 starts at 4 units (after B0 on worker 1 ends) and lasts 2.
      REQUIRE(e.at("cat") == "backward");
      REQUIRE(e.at("tid") == 0);
      REQUIRE(e.at("ts").get<double>() == 40.0);
      REQUIRE(e.at("dur").get<double>() == 20.0);
      REQUIRE(e.at("args").at("stage") == 0);
    }
  }
  REQUIRE(complete == 4);
  REQUIRE(doc.at("otherData").at("simulated") == true);
  REQUIRE(doc.at("otherData").at("schedule") == "gpipe");
  REQUIRE_THROWS_WITH(Trace::replayed(gpipe(2, 1), Costs{}, 0.0),
                      Catch::Contains("microseconds_per_unit must be > 0"));
}

TEST_CASE("replayed_bubble: the schedule replayed with the trace's own durations") {
  // The GPipe p = 2, m = 2 step of the first test case, but the runtime lost time: worker 1's
  // F1 starts 1 late (a slow hand-off), which pushes everything after it back by 1.
  //   worker 0  F0 F1 .  .  .  .  .  B1 B1 B0 B0        wall 0..11
  //   worker 1  .  F0 .  F1 B1 B1 B0 B0 .  .  .
  Trace t(2);
  t.add(ev(0, ActionKind::kForward, 0, 0, 1));
  t.add(ev(0, ActionKind::kForward, 1, 1, 2));
  t.add(ev(1, ActionKind::kForward, 0, 1, 2));
  t.add(ev(1, ActionKind::kForward, 1, 3, 4));
  t.add(ev(1, ActionKind::kBackward, 1, 4, 6));
  t.add(ev(1, ActionKind::kBackward, 0, 6, 8));
  t.add(ev(0, ActionKind::kBackward, 1, 7, 9));
  t.add(ev(0, ActionKind::kBackward, 0, 9, 11));
  // Measured: idle 5 + 5 over 2 x 11. Replayed with the same durations and no lost time,
  // every action starts as soon as its inputs exist (worker 0's B1 at 5, right after worker
  // 1's): wall 9, idle 3 + 3, the textbook (p-1)/(m+p-1) = 1/3.
  REQUIRE(t.bubble_fraction() == Approx(10.0 / 22));
  REQUIRE(t.replayed_bubble(gpipe(2, 2)) == Approx(6.0 / 18));
  REQUIRE(t.replayed_bubble(gpipe(2, 2)) == Approx(theoretical_bubble(2, 2)));

  // Unequal stages (worker 1 twice as slow): the replay keeps the imbalance, which is the
  // schedule's and the stages' doing, not the runtime's. Worker 0: F 0-1, 1-2; worker 1:
  // F0 1-3, F1 3-5, B1 5-9, B0 9-13; worker 0: B1 9-11, B0 13-15 -> wall 15, busy 6 and 12.
  Trace slow(2);
  slow.add(ev(0, ActionKind::kForward, 0, 0, 1));
  slow.add(ev(0, ActionKind::kForward, 1, 1, 2));
  slow.add(ev(1, ActionKind::kForward, 0, 1, 3));
  slow.add(ev(1, ActionKind::kForward, 1, 3, 5));
  slow.add(ev(1, ActionKind::kBackward, 1, 5, 9));
  slow.add(ev(1, ActionKind::kBackward, 0, 9, 13));
  slow.add(ev(0, ActionKind::kBackward, 1, 9, 11));
  slow.add(ev(0, ActionKind::kBackward, 0, 13, 15));
  REQUIRE(slow.replayed_bubble(gpipe(2, 2)) == Approx((9.0 + 3.0) / 30));
  REQUIRE(slow.replayed_bubble(gpipe(2, 2)) == Approx(slow.bubble_fraction()));

  // Another schedule than the one measured: an action without an event is named.
  REQUIRE_THROWS_WITH(t.replayed_bubble(gpipe(2, 3)),
                      Catch::Contains("has no event in the trace") && Catch::Contains("gpipe"));
}
