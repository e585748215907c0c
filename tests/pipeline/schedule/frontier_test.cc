// The schedules since 2023: interleaved zero bubble, looped BFS, ZB-V and DualPipeV. Each
// generator's action lists equal those of its reference implementation (torch.distributed.
// pipelining's ScheduleInterleavedZeroBubble / ScheduleLoopedBFS / ScheduleZBVZeroBubble, and
// deepseek-ai/DualPipe's dualpipev.py, read and replayed by hand for these sizes, with the
// reference's idle slots dropped), every schedule validates over a grid of p and m, and the
// replay reproduces each one's bubble and memory closed forms.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "pipeline/schedule/validate.h"
#include "pipeline/schedule/generators.h"
#include "pipeline/schedule/replay.h"

using namespace pipewright::pipeline;

namespace {

/// torch's _Action spelling of a worker's list: "<stage><F|I|W|B><micro-batch>", space-separated.
std::string torch_actions(const Schedule& s, int worker) {
  std::string out;
  for (const Action& a : s.actions.at(static_cast<size_t>(worker))) {
    if (!out.empty()) out += ' ';
    out += std::to_string(a.stage) + action_letter(a.kind) + std::to_string(a.microbatch);
  }
  return out;
}

std::vector<std::string> lists(const Schedule& s) {
  std::vector<std::string> out;
  for (int w = 0; w < s.num_workers; ++w) out.push_back(torch_actions(s, w));
  return out;
}

bool same_lists(const Schedule& a, const Schedule& b) {
  return lists(a) == lists(b) && a.stage_worker == b.stage_worker;
}

/// Costs of a virtual stage when a worker's whole share costs tF = tI = tW = 1 and it holds v
/// virtual stages.
Costs equal_costs(int v) { return Costs::split(1.0 / v, 1.0 / v, 1.0 / v); }

}  // namespace

TEST_CASE("placements: round robin and V") {
  REQUIRE(round_robin_placement(2, 2) == std::vector<int>{0, 1, 0, 1});
  REQUIRE(v_placement(4) == std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0});
  REQUIRE(schedule_placement("zb-v", 3, 2) == v_placement(3));
  REQUIRE(schedule_placement("dualpipev", 3, 2) == v_placement(3));
  REQUIRE(schedule_placement("interleaved-zb", 3, 2) == round_robin_placement(3, 2));
  REQUIRE(schedule_placement("1f1b", 3) == round_robin_placement(3));
  REQUIRE_THROWS_WITH(v_placement(0), "v_placement: p must be >= 1 (got 0)");
  REQUIRE_THROWS_WITH(make_schedule("zb-v", 2, 4, 1),
                      "schedule 'zb-v' holds two stages per worker (a V), so v must be 2 (got 1)");
  REQUIRE_THROWS_WITH(make_schedule("zb-h1", 2, 4, 2),
                      Catch::Contains("use 'interleaved-1f1b', 'interleaved-zb' or 'looped-bfs'"));
}

TEST_CASE("looped-bfs: torch's ScheduleLoopedBFS order") {
  const Schedule s = looped_bfs(2, 4, 2);
  REQUIRE(s.stage_worker == round_robin_placement(2, 2));
  REQUIRE(lists(s) == std::vector<std::string>{
                          "0F0 0F1 0F2 0F3 2F0 2F1 2F2 2F3 2B3 2B2 2B1 2B0 0B3 0B2 0B1 0B0",
                          "1F0 1F1 1F2 1F3 3F0 3F1 3F2 3F3 3B3 3B2 3B1 3B0 1B3 1B2 1B1 1B0"});
}

TEST_CASE("interleaved-zb: torch's ScheduleInterleavedZeroBubble order") {
  const Schedule s = interleaved_zero_bubble(2, 4, 2);
  REQUIRE(lists(s) ==
          std::vector<std::string>{
              "0F0 0F1 2F0 2F1 2I0 2W0 0F2 2I1 2W1 0F3 0I0 0W0 2F2 0I1 0W1 2F3 2I2 2W2 2I3 2W3 "
              "0I2 0W2 0I3 0W3",
              "1F0 1F1 3F0 3I0 3F1 3I1 3W0 1F2 1I0 3W1 1F3 1I1 1W0 3F2 3I2 1W1 3F3 3I3 3W2 1I2 "
              "3W3 1I3 1W2 1W3"});
  REQUIRE_THROWS_WITH(interleaved_zero_bubble(4, 9, 2),
                      "interleaved-zb: the number of micro-batches m = 9 must be a multiple of "
                      "max(1, m / p) = 2");
}

TEST_CASE("zb-v: torch's ScheduleZBVZeroBubble order") {
  const Schedule two = zb_v(2, 4);
  REQUIRE(two.stage_worker == v_placement(2));
  REQUIRE(lists(two) ==
          std::vector<std::string>{
              "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 "
              "0I2 0W2 0I3 0W3",
              "1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 2I3 "
              "1I3 1W2 2W3 1W3"});
  const Schedule four = zb_v(4, 8);
  REQUIRE(torch_actions(four, 0) ==
          "0F0 0F1 0F2 0F3 0F4 0F5 0F6 7F0 7I0 7W0 7F1 7I1 7W1 7F2 7I2 7W2 7F3 7I3 7W3 0F7 0I0 "
          "0W0 7F4 7I4 7W4 0I1 0W1 7F5 7I5 7W5 0I2 0W2 7F6 7I6 7W6 0I3 0W3 7F7 7I7 7W7 0I4 0W4 "
          "0I5 0W5 0I6 0W6 0I7 0W7");
  REQUIRE(torch_actions(four, 1) ==
          "1F0 1F1 1F2 1F3 1F4 6F0 1F5 6F1 6I0 6W0 6F2 6I1 6W1 6F3 6I2 6W2 1F6 1I0 1W0 6F4 6I3 "
          "6W3 1F7 1I1 1W1 6F5 6I4 6W4 1I2 1W2 6F6 6I5 6W5 1I3 1W3 6F7 6I6 6W6 1I4 6I7 1I5 1W4 "
          "1I6 1W5 1I7 1W6 6W7 1W7");
  REQUIRE(torch_actions(four, 2) ==
          "2F0 2F1 2F2 5F0 2F3 5F1 2F4 5F2 5I0 5W0 5F3 5I1 5W1 2F5 2I0 2W0 5F4 5I2 5W2 2F6 2I1 "
          "2W1 5F5 5I3 5W3 2F7 2I2 2W2 5F6 5I4 5W4 2I3 2W3 5F7 5I5 5W5 2I4 5I6 2I5 5I7 2I6 2W4 "
          "2I7 2W5 5W6 5W7 2W6 2W7");
  REQUIRE(torch_actions(four, 3) ==
          "3F0 4F0 3F1 4F1 3F2 4F2 3F3 4F3 4I0 4W0 3F4 3I0 3W0 4F4 4I1 4W1 3F5 3I1 3W1 4F5 4I2 "
          "4W2 3F6 3I2 3W2 4F6 4I3 4W3 3F7 3I3 3W3 4F7 4I4 4W4 3I4 4I5 3I5 4I6 3I6 4I7 3I7 3W4 "
          "4W5 4W6 4W7 3W5 3W6 3W7");
}

TEST_CASE("dualpipev: DeepSeek's dualpipev.py order (overlapped pairs as F then B)") {
  REQUIRE(lists(dualpipev(2, 4)) ==
          std::vector<std::string>{
              "0F0 0F1 0F2 3F0 3I0 3W0 3F1 0F3 3B1 3F2 0B0 3B2 3F3 0B1 3B3 0I2 0W2 0I3 0W3",
              "1F0 2F0 1F1 2F1 1F2 2B0 2F2 1B0 1F3 2B1 2F3 1B1 2B2 1B2 2I3 1I3 2W3 1W3"});
  const Schedule four = dualpipev(4, 8);
  REQUIRE(torch_actions(four, 0) ==
          "0F0 0F1 0F2 0F3 0F4 0F5 0F6 7F0 7I0 7W0 7F1 7I1 7W1 7F2 7I2 7W2 7F3 0F7 7B3 7F4 0B0 "
          "7B4 7F5 0B1 7B5 7F6 0B2 7B6 7F7 0B3 7B7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7");
  REQUIRE(torch_actions(four, 1) ==
          "1F0 1F1 1F2 1F3 1F4 6F0 1F5 6F1 6I0 6W0 6F2 6I1 6W1 6F3 1F6 6B2 6F4 1B0 1F7 6B3 6F5 "
          "1B1 6B4 6F6 1B2 6B5 6F7 1B3 6B6 1B4 6I7 1I5 6W7 1I6 1W5 1I7 1W6 1W7");
  REQUIRE(torch_actions(four, 2) ==
          "2F0 2F1 2F2 5F0 2F3 5F1 2F4 5F2 5I0 5W0 5F3 2F5 5B1 5F4 2B0 2F6 5B2 5F5 2B1 2F7 5B3 "
          "5F6 2B2 5B4 5F7 2B3 5B5 2B4 5B6 2I5 5I7 2I6 2W5 2I7 5W7 2W6 2W7");
  REQUIRE(torch_actions(four, 3) ==
          "3F0 4F0 3F1 4F1 3F2 4F2 3F3 4F3 3F4 4B0 4F4 3B0 3F5 4B1 4F5 3B1 3F6 4B2 4F6 3B2 3F7 "
          "4B3 4F7 3B3 4B4 3B4 4B5 3B5 4I6 3I6 4I7 3I7 4W6 3W6 4W7 3W7");
  REQUIRE_THROWS_WITH(dualpipev(3, 5), "dualpipev: needs at least 2p = 6 micro-batches (got m = 5)");
}

TEST_CASE("looped-bfs over any placement (Pipe::forward's schedule) validates") {
  for (int p = 1; p <= 5; ++p) {
    for (int m = 1; m <= 9; ++m) {
      CAPTURE(p, m);
      REQUIRE_NOTHROW(validate(looped_bfs(v_placement(p), m)));
      REQUIRE_NOTHROW(validate(looped_bfs(round_robin_placement(p, 3), m)));
    }
  }
  REQUIRE(lists(looped_bfs(v_placement(2), 2)) ==
          std::vector<std::string>{"0F0 0F1 3F0 3F1 3B1 3B0 0B1 0B0",
                                   "1F0 1F1 2F0 2F1 2B1 2B0 1B1 1B0"});
  REQUIRE(same_lists(looped_bfs(round_robin_placement(2, 2), 4), looped_bfs(2, 4, 2)));
  REQUIRE_THROWS_WITH(looped_bfs(std::vector<int>{0, 2}, 2),
                      "looped-bfs: worker 1 holds no stage");
}

TEST_CASE("every new schedule validates for p in 1..5 and many m") {
  for (int p = 1; p <= 5; ++p) {
    for (int m = 1; m <= 17; ++m) {
      CAPTURE(p, m);
      REQUIRE_NOTHROW(validate(looped_bfs(p, m, 2)));
      REQUIRE_NOTHROW(validate(looped_bfs(p, m, 3)));
      REQUIRE_NOTHROW(validate(zb_v(p, m)));
      if (m >= 2 * p) REQUIRE_NOTHROW(validate(dualpipev(p, m)));
      if (m % std::max(1, m / p) == 0) {
        REQUIRE_NOTHROW(validate(interleaved_zero_bubble(p, m, 2)));
        REQUIRE_NOTHROW(validate(interleaved_zero_bubble(p, m, 3)));
      }
    }
  }
}

TEST_CASE("simulated bubble and memory: the closed forms") {
  // A whole stage costs tF = tI = tW = 1 (tB = 2); a virtual stage costs 1/v of that.
  const int p = GENERATE(2, 3, 4, 5);
  const int k = GENERATE(2, 3, 4);
  const int m = k * p;  // every generator's m constraint holds
  CAPTURE(p, m);
  SECTION("looped-bfs: GPipe's idle over a v times thinner stage, all m cells held") {
    for (int v : {2, 3}) {
      const ScheduleReplay sim = replay_schedule(looped_bfs(p, m, v), equal_costs(v));
      for (double idle : sim.idle) REQUIRE(idle == Approx((p - 1) * 3.0 / v));
      REQUIRE(sim.memory.worker_activations == std::vector<int>(p, m * v));
    }
  }
  SECTION("zb-v: idle (p-1)(tF+tI-tW) per virtual stage, 2p cells (1F1B's peak) on every worker") {
    const ScheduleReplay sim = replay_schedule(zb_v(p, m), equal_costs(2));
    for (double idle : sim.idle) REQUIRE(idle == Approx((p - 1) * 0.5));
    REQUIRE(sim.memory.worker_activations == std::vector<int>(p, 2 * p));
    // Against 1F1B on the same model: its worker 0 holds p whole-stage cells (= 2p
    // virtual-stage cells) and idles (p-1)(tF+tB) = 3(p-1); ZB-H1 idles (p-1)(tF+tI-tW) = p-1.
    const ScheduleReplay one = replay_schedule(one_f_one_b(p, m), Costs::split(1, 1, 1));
    REQUIRE(one.memory.worker_activations[0] == p);
    REQUIRE(one.idle[0] == Approx(3.0 * (p - 1)));
  }
  SECTION("interleaved-zb: the same idle as ZB-V, 2p virtual-stage cells on every worker (v = 2)") {
    const ScheduleReplay sim = replay_schedule(interleaved_zero_bubble(p, m, 2), equal_costs(2));
    for (double idle : sim.idle) REQUIRE(idle == Approx((p - 1) * 0.5));
    REQUIRE(sim.memory.worker_activations == std::vector<int>(p, 2 * p));
  }
  SECTION("dualpipev (pairs run as F then B): ZB-V's idle, one more virtual-stage cell (PP + 1)") {
    const ScheduleReplay sim = replay_schedule(dualpipev(p, m), equal_costs(2));
    for (double idle : sim.idle) REQUIRE(idle == Approx((p - 1) * 0.5));
    REQUIRE(sim.memory.worker_activations == std::vector<int>(p, 2 * p + 1));
  }
}
