// The generators, tested by value: exact action lists for small cases, then every generator
// over p in 1..4 and m in 1..16 must validate.
#include <catch2/catch.hpp>

#include <algorithm>

#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/schedule/validate.h"
#include "pipeline/schedule/generators.h"

using namespace pipewright::pipeline;

namespace {

// "F0 F1 B1 B0" -> actions on `stage`.
std::vector<Action> parse(int stage, const std::string& text) {
  std::vector<Action> out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ' ') {
      ++i;
      continue;
    }
    ActionKind kind = ActionKind::kForward;
    switch (text[i]) {
      case 'F': kind = ActionKind::kForward; break;
      case 'R': kind = ActionKind::kRecompute; break;
      case 'B': kind = ActionKind::kBackward; break;
      case 'I': kind = ActionKind::kBackwardInput; break;
      case 'W': kind = ActionKind::kBackwardWeight; break;
    }
    size_t end = text.find(' ', i);
    if (end == std::string::npos) end = text.size();
    out.push_back(Action{stage, kind, std::stoi(text.substr(i + 1, end - i - 1))});
    i = end;
  }
  return out;
}

std::string str(const std::vector<Action>& list) {
  std::string out;
  for (const Action& a : list) {
    if (!out.empty()) out += ' ';
    out += a.str();
  }
  return out;
}

// Compares worker lists as text so a failure shows both sides readably.
void check_lists(const Schedule& s, const std::vector<std::string>& expected) {
  REQUIRE(s.actions.size() == expected.size());
  for (size_t w = 0; w < expected.size(); ++w) {
    INFO("worker " << w);
    CHECK(str(s.actions[w]) == str(parse(static_cast<int>(w), expected[w])));
  }
}

int count_leading_forwards(const std::vector<Action>& list) {
  int n = 0;
  while (n < static_cast<int>(list.size()) && list[n].kind == ActionKind::kForward) ++n;
  return n;
}

}  // namespace

TEST_CASE("gpipe: all forwards, then backwards in reverse micro-batch order") {
  const Schedule s = gpipe(2, 3);
  CHECK(s.name == "gpipe");
  CHECK(s.num_workers == 2);
  CHECK(s.num_stages == 2);
  CHECK(s.num_microbatches == 3);
  CHECK(s.stage_worker == std::vector<int>{0, 1});
  check_lists(s, {"F0 F1 F2 B2 B1 B0", "F0 F1 F2 B2 B1 B0"});

  check_lists(gpipe(3, 2), {"F0 F1 B1 B0", "F0 F1 B1 B0", "F0 F1 B1 B0"});
  check_lists(gpipe(1, 1), {"F0 B0"});
  check_lists(gpipe(4, 1), {"F0 B0", "F0 B0", "F0 B0", "F0 B0"});
}

TEST_CASE("1f1b: warm-up, steady pairs and cool-down, p=2 m=4") {
  const Schedule s = one_f_one_b(2, 4);
  CHECK(s.name == "1f1b");
  check_lists(s, {"F0 F1 B0 F2 B1 F3 B2 B3", "F0 B0 F1 B1 F2 B2 F3 B3"});
}

TEST_CASE("1f1b: stage s warms up with min(p-s-1, m) forwards, p=4 m=8") {
  const Schedule s = one_f_one_b(4, 8);
  // The steady state starts with one more forward, so the leading run of forwards is p-s.
  CHECK(count_leading_forwards(s.actions[0]) == 4);
  CHECK(count_leading_forwards(s.actions[1]) == 3);
  CHECK(count_leading_forwards(s.actions[2]) == 2);
  CHECK(count_leading_forwards(s.actions[3]) == 1);
  check_lists(s, {
                     "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
                     "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
                     "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
                     "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7",
                 });
}

TEST_CASE("1f1b with m < p: the first stages degenerate to fill-drain") {
  // Stage 0 and 1 have p-s-1 >= m = 2: all forwards, then all backwards (in order 0, 1).
  check_lists(one_f_one_b(4, 2), {"F0 F1 B0 B1", "F0 F1 B0 B1", "F0 F1 B0 B1", "F0 B0 F1 B1"});
}

TEST_CASE("interleaved 1f1b: Megatron-LM's virtual-stage order, p=2 m=4 v=2") {
  const Schedule s = interleaved_1f1b(2, 4, 2);
  CHECK(s.name == "interleaved-1f1b");
  CHECK(s.num_workers == 2);
  CHECK(s.num_stages == 4);
  CHECK(s.stage_worker == std::vector<int>{0, 1, 0, 1});
  CHECK(s.stages_of(0) == std::vector<int>{0, 2});
  // Worker 0 (stages 0 and 2) warms up with (p-w-1)*2 + (v-1)*p = 4 forwards: virtual stage 0
  // of micro-batches 0 1, then virtual stage 1 of 0 1. Its backwards start on virtual stage 1
  // (stage 2).
  const std::string w0 = "F0@0 F1@0 F0@2 F1@2 F2@0 B0@2 F3@0 B1@2 F2@2 B0@0 F3@2 B1@0 B2@2 B3@2 B2@0 B3@0";
  // Worker 1 (stages 1 and 3) warms up with 2 forwards.
  const std::string w1 = "F0@1 F1@1 F0@3 B0@3 F1@3 B1@3 F2@1 B0@1 F3@1 B1@1 F2@3 B2@3 F3@3 B3@3 B2@1 B3@1";
  CHECK(str(s.actions[0]) == w0);
  CHECK(str(s.actions[1]) == w1);
}

TEST_CASE("interleaved 1f1b with m == p runs every forward first (Megatron-LM)") {
  const Schedule s = interleaved_1f1b(2, 2, 2);
  CHECK(count_leading_forwards(s.actions[0]) == 4);
  CHECK(count_leading_forwards(s.actions[1]) == 4);
}

TEST_CASE("interleaved 1f1b rejects m not a multiple of p, naming both") {
  CHECK_THROWS_WITH(interleaved_1f1b(4, 6, 2),
                    Catch::Contains("m = 6") && Catch::Contains("p = 4"));
  CHECK_THROWS_AS(interleaved_1f1b(2, 4, 0), std::invalid_argument);
}

TEST_CASE("zb-h1: split backward, W's delayed by s on stage s") {
  const Schedule s = zb_h1(3, 4);
  CHECK(s.name == "zb-h1");
  check_lists(s, {
                     "F0 F1 F2 I0 W0 F3 I1 W1 I2 W2 I3 W3",
                     "F0 F1 I0 F2 I1 W0 F3 I2 W1 I3 W2 W3",
                     "F0 I0 F1 I1 F2 I2 W0 F3 I3 W1 W2 W3",
                 });
}

TEST_CASE("zb-h2: 2p-1 forwards in flight on the first stage") {
  const Schedule s = zb_h2(3, 6);
  CHECK(s.name == "zb-h2");
  CHECK(count_leading_forwards(s.actions[0]) == 5);
  CHECK(count_leading_forwards(s.actions[2]) == 1);
}

TEST_CASE("generators reject p, m < 1 naming the value") {
  CHECK_THROWS_WITH(gpipe(0, 4), Catch::Contains("p") && Catch::Contains("got 0"));
  CHECK_THROWS_WITH(one_f_one_b(2, 0), Catch::Contains("m") && Catch::Contains("got 0"));
  CHECK_THROWS_AS(zb_h1(-1, 2), std::invalid_argument);
  CHECK_THROWS_AS(zb_h2(2, -3), std::invalid_argument);
}

TEST_CASE("every generator validates for p in 1..4, m in 1..16") {
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 16; ++m) {
      for (const ScheduleInfo& row : registered_schedules()) {
        const std::string& name = row.name;
        const VirtualStages vs = row.virtual_stages;  // any v: tried up to 3
        for (int v = vs.min; v <= (vs.max == 0 ? 3 : vs.max); ++v) {
          if (name == "interleaved-1f1b" && m % p != 0) continue;
          if (name == "interleaved-zb" && m % std::max(1, m / p) != 0) continue;
          if (name == "dualpipev" && m < 2 * p) continue;
          INFO(name << " p=" << p << " m=" << m << " v=" << v);
          const Schedule s = make_schedule(name, p, m, v);
          CHECK(s.name == name);
          CHECK_NOTHROW(validate(s));
          // With recompute of every cell as well.
          CHECK_NOTHROW(validate(with_recompute(s, checkpoint_predicate(Checkpoint::kAlways, m))));
        }
      }
    }
  }
}

TEST_CASE("make_schedule: unknown names and v != 1 are rejected with the valid names") {
  CHECK_THROWS_WITH(make_schedule("pipedream", 2, 4),
                    Catch::Contains("'pipedream'") && Catch::Contains("'gpipe'") &&
                        Catch::Contains("'1f1b'") && Catch::Contains("'interleaved-1f1b'") &&
                        Catch::Contains("'zb-h1'") && Catch::Contains("'zb-h2'"));
  CHECK_THROWS_WITH(make_schedule("1f1b", 2, 4, 2), Catch::Contains("v must be 1"));
  CHECK(make_schedule("interleaved-1f1b", 2, 4, 2).num_stages == 4);
  // One stage per worker is 1F1B's or GPipe's own: the interleaved family takes v >= 2.
  for (const char* name : {"interleaved-1f1b", "interleaved-zb", "looped-bfs"}) {
    CHECK_THROWS_WITH(make_schedule(name, 2, 4, 1), Catch::Contains("v >= 2"));
  }
}
