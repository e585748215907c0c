// The schedule registry: every row's facts agree with what its generator produces, a new
// schedule is one generator plus one row (the toy of docs/schedules.md, "Write your own
// schedule"), and bad rows and names are refused naming the value.
#include <catch2/catch.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/schedule/generators.h"
#include "pipeline/schedule/registry.h"
#include "pipeline/schedule/replay.h"
#include "pipeline/schedule/validate.h"

using namespace pipewright::pipeline;

namespace {

bool has_split_backward(const Schedule& s) {
  for (const auto& list : s.actions) {
    for (const Action& a : list) {
      if (a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackwardWeight) {
        return true;
      }
    }
  }
  return false;
}

// The toy of docs/schedules.md: GPipe whose backwards run oldest micro-batch first.
Schedule gpipe_fifo(int p, int m) {
  Schedule s = gpipe(p, m);
  s.name = "gpipe-fifo";
  for (auto& list : s.actions) {
    const auto first_backward = std::find_if(list.begin(), list.end(), [](const Action& a) {
      return a.kind != ActionKind::kForward;
    });
    std::reverse(first_backward, list.end());
  }
  return s;
}

}  // namespace

TEST_CASE("every row's v rule, placement and B split are what its generator makes") {
  const std::vector<ScheduleInfo> rows = registered_schedules();
  REQUIRE(schedule_names() == std::vector<std::string>{"gpipe", "1f1b", "interleaved-1f1b",
                                                       "zb-h1", "zb-h2", "interleaved-zb",
                                                       "looped-bfs", "zb-v", "dualpipev"});
  for (const ScheduleInfo& row : rows) {
    CAPTURE(row.name);
    CHECK(!row.description.empty());
    for (int p : {2, 3, 4}) {
      const int m = 4 * p;
      const int v = row.virtual_stages.clamp(2);
      CAPTURE(p, v);
      const Schedule s = make_schedule(row.name, p, m, v);
      CHECK_NOTHROW(validate(s));
      CHECK(s.name == row.name);
      CHECK(s.num_stages == p * v);
      CHECK(s.stage_worker == place(row.placement, p, v));
      CHECK(schedule_placement(row.name, p, v) == s.stage_worker);
      CHECK(has_split_backward(s) == row.splits_backward);
      if (row.virtual_stages.max != 1 && row.virtual_stages.allows(1)) {
        CHECK(make_schedule(row.name, p, m, 1).num_stages == p);
      }
    }
  }
}

TEST_CASE("a schedule registered at run time is found by name like the built-in ones") {
  register_schedule({.name = "gpipe-fifo",
                     .generate = [](int p, int m, int /*v*/) { return gpipe_fifo(p, m); },
                     .virtual_stages = {1, 1},
                     .placement = StagePlacement::kRoundRobin,
                     .splits_backward = false,
                     .description = "GPipe, backwards oldest first"});
  REQUIRE(schedule_names().back() == "gpipe-fifo");
  REQUIRE(find_schedule("gpipe-fifo").description == "GPipe, backwards oldest first");
  const std::string described = describe_schedules();
  REQUIRE(described.find("\n  gpipe-fifo  ") != std::string::npos);
  REQUIRE(described.find(" GPipe, backwards oldest first\n") != std::string::npos);

  const Schedule s = make_schedule("gpipe-fifo", 3, 4);
  REQUIRE_NOTHROW(validate(s));
  REQUIRE(s.actions[0].back() == Action{0, ActionKind::kBackward, 3});
  // The same memory as GPipe (every micro-batch held before the first backward), the same
  // makespan with equal costs.
  REQUIRE(peak_memory(s).stage_activations == peak_memory(gpipe(3, 4)).stage_activations);
  REQUIRE(replay_schedule(s).makespan == replay_schedule(gpipe(3, 4)).makespan);
  REQUIRE(schedule_placement("gpipe-fifo", 3) == round_robin_placement(3));
  REQUIRE_THROWS_WITH(make_schedule("gpipe-fifo", 3, 4, 2),
                      Catch::StartsWith("schedule 'gpipe-fifo' has one virtual stage per worker, "
                                        "so v must be 1 (got 2); use 'interleaved-1f1b'"));

  REQUIRE_THROWS_WITH(register_schedule(find_schedule("gpipe-fifo")),
                      "register_schedule: 'gpipe-fifo' is already registered");
}

TEST_CASE("bad rows and unknown names are refused naming the value") {
  REQUIRE_THROWS_WITH(register_schedule({.name = ""}), "register_schedule: the name is empty");
  REQUIRE_THROWS_WITH(register_schedule({.name = "nothing"}),
                      "register_schedule: 'nothing' has no generator");
  REQUIRE_THROWS_WITH(
      register_schedule({.name = "backwards-v",
                         .generate = [](int p, int m, int) { return gpipe(p, m); },
                         .virtual_stages = {3, 2}}),
      "register_schedule: 'backwards-v': virtual_stages must have 1 <= min and max = 0 or "
      "max >= min (min: 3, max: 2)");
  REQUIRE_THROWS_WITH(find_schedule("pipedream"),
                      Catch::StartsWith("unknown schedule 'pipedream' (valid: 'gpipe', '1f1b'"));
  REQUIRE_THROWS_WITH(schedule_placement("zb-v", 2, 1),
                      "schedule 'zb-v' holds two stages per worker (a V), so v must be 2 (got 1)");
}

TEST_CASE("VirtualStages: allows, clamp and str") {
  const VirtualStages one{1, 1}, any{1, 0}, two{2, 2}, some{2, 4};
  CHECK(one.clamp(2) == 1);
  CHECK(any.clamp(2) == 2);
  CHECK(two.clamp(1) == 2);
  CHECK(some.clamp(9) == 4);
  CHECK(some.allows(3));
  CHECK_FALSE(some.allows(5));
  CHECK(one.str() == "1");
  CHECK(any.str() == "any v >= 1");
  CHECK(some.str() == "2..4");
}
