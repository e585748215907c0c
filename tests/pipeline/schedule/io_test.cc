// Printing and loading: to_ascii timelines, CSV round trips and CSV parse errors.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "pipeline/schedule/ascii.h"
#include "pipeline/schedule/generators.h"
#include "pipeline/schedule/io.h"
#include "pipeline/schedule/svg.h"

using namespace pipewright::pipeline;

namespace {

bool same(const Schedule& a, const Schedule& b) {
  return a.name == b.name && a.num_workers == b.num_workers && a.num_stages == b.num_stages &&
         a.num_microbatches == b.num_microbatches && a.stage_worker == b.stage_worker && a.actions == b.actions;
}

std::string error_of(const std::string& csv) {
  try {
    from_csv(csv);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("to_ascii draws gpipe's fill-drain") {
  CHECK(to_ascii(gpipe(3, 4)) ==
        "worker 0  F0 F1 F2 F3 .  .  .  .  .  .  B3 B3 B2 B2 B1 B1 B0 B0\n"
        "worker 1  .  F0 F1 F2 F3 .  .  .  B3 B3 B2 B2 B1 B1 B0 B0 .  .\n"
        "worker 2  .  .  F0 F1 F2 F3 B3 B3 B2 B2 B1 B1 B0 B0 .  .  .  .\n");
}

TEST_CASE("to_ascii with tF = tB, a split schedule, and virtual-stage letters when interleaved") {
  CHECK(to_ascii(one_f_one_b(2, 3), Costs::unit(1, 1)) ==
        "worker 0  F0 F1 .  B0 F2 B1 .  B2\n"
        "worker 1  .  F0 B0 F1 B1 F2 B2 .\n");
  CHECK(to_ascii(zb_h1(2, 2), Costs::split(1, 1, 1)) ==
        "worker 0  F0 F1 .  I0 W0 I1 W1\n"
        "worker 1  .  F0 I0 F1 I1 W0 W1\n");
  CHECK(to_ascii(interleaved_1f1b(2, 2, 2), Costs::unit(1, 1)) ==
        "worker 0  F0a F1a F0b F1b .   .   B0b B1b B0a B1a\n"
        "worker 1  .   F0a F1a F0b F1b B0b B1b B0a B1a .\n");
}

TEST_CASE("draw_replay draws a replay on shared processors as computed") {
  // gpipe(2, 2), tF = tB = 1, both workers on one processor: F0 alone, then w0's F1 and
  // w1's F0 at half speed (1..3); w1's F1 and B1 alone; w1's B0 and w0's B1 at half speed
  // (5..7); w0's B0 alone.
  const Schedule s = gpipe(2, 2);
  const ScheduleReplay r = replay_on_shared_processors(s, Costs::unit(1, 1), 1, 1);
  REQUIRE(r.makespan == Approx(8));
  CHECK(draw_replay(s, r, 1.0) ==
        "worker 0  F0 F1 F1 .  .  B1 B1 B0\n"
        "worker 1  .  F0 F0 F1 B1 B0 B0 .\n");
  // Two time units a column: starts and ends round to the nearest column, halves up; each
  // action is given a column and a later one draws over it: w1's B1 (4..5) over its F1 (3..4).
  CHECK(draw_replay(s, r, 2.0) ==
        "worker 0  F0 F1 .  B1 B0\n"
        "worker 1  .  F0 B1 B0 .\n");
  // The dedicated replay, drawn, is to_ascii's.
  CHECK(draw_replay(s, replay_schedule(s, Costs::unit(1, 1)), 1.0) ==
        to_ascii(s, Costs::unit(1, 1)));
  CHECK_THROWS_WITH(draw_replay(s, r, 0.0), Catch::Contains("unit must be > 0, got 0"));
  CHECK_THROWS_WITH(draw_replay(gpipe(3, 2), r, 1.0),
                    Catch::Contains("the replay has 2 workers, the schedule 3"));
}

TEST_CASE("to_ascii needs whole-unit costs") {
  CHECK_THROWS_WITH(to_ascii(gpipe(2, 2), Costs::unit(1, 1.5)), Catch::Contains("whole number"));
}

TEST_CASE("to_ascii_scaled draws measured costs in whole units of makespan / columns") {
  // gpipe(3, 4) with tF = 1, tB = 2 spans 18 units; in microseconds x 37.5 and 18 columns
  // it is the same drawing, one column = 37.5 us.
  double unit = 0;
  CHECK(to_ascii_scaled(gpipe(3, 4), Costs::unit(37.5, 75.0), 18, &unit) == to_ascii(gpipe(3, 4)));
  CHECK(unit == 37.5);
  // Coarser: 4 columns of the 280 us step are 70 us each; B (40 us) rounds to one unit and F
  // (30 us) to none, raised to one.
  CHECK(to_ascii_scaled(one_f_one_b(2, 3), Costs::unit(30.0, 40.0), 4) ==
        to_ascii(one_f_one_b(2, 3), Costs::unit(1, 1)));
  // An action far shorter than a column still shows (at least one unit).
  Costs tiny = Costs::unit(100.0, 200.0);
  tiny.per_stage = {StageCosts{.forward = 100.0, .backward = 200.0},
                    StageCosts{.forward = 0.01, .backward = 200.0}};
  const std::string drawn = to_ascii_scaled(gpipe(2, 1), tiny, 5);
  CHECK(drawn == "worker 0  F0 .  .  .  B0 B0\n"
                 "worker 1  .  F0 B0 B0 .  .\n");
  CHECK_THROWS_WITH(to_ascii_scaled(gpipe(2, 2), Costs{}, 0), Catch::Contains("columns must be >= 1, got 0"));
}

TEST_CASE("to_svg draws one box per action") {
  const std::string svg = to_svg(one_f_one_b(2, 2));
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("1f1b: p=2, m=2") != std::string::npos);
  size_t boxes = 0;
  for (size_t at = svg.find("rx=\"3\""); at != std::string::npos; at = svg.find("rx=\"3\"", at + 1)) ++boxes;
  CHECK(boxes == 8 + 2);  // 8 actions + 2 legend swatches (F, B)
}

TEST_CASE("CSV: the format, and a round trip of every generator") {
  CHECK(to_csv(one_f_one_b(2, 2)) ==
        "# schedule name=1f1b workers=2 stages=2 microbatches=2 stage_worker=0,1\n"
        "worker,index,stage,kind,microbatch\n"
        "0,0,0,F,0\n0,1,0,F,1\n0,2,0,B,0\n0,3,0,B,1\n"
        "1,0,1,F,0\n1,1,1,B,0\n1,2,1,F,1\n1,3,1,B,1\n");
  for (const std::string& name : schedule_names()) {
    const int v = name == "interleaved-1f1b" || name == "interleaved-zb" ||
                          name == "looped-bfs" || name == "zb-v" || name == "dualpipev"
                      ? 2
                      : 1;
    const Schedule s = with_recompute(make_schedule(name, 2, 4, v), checkpoint_predicate(Checkpoint::kExceptLast, 4));
    INFO(name);
    CHECK(same(from_csv(to_csv(s)), s));
  }
}

TEST_CASE("CSV without metadata, rows in any order, blank lines and CRLF") {
  const Schedule s = from_csv(
      "worker,index,stage,kind,microbatch\r\n"
      "1,1,1,B,0\r\n"
      "0,1,0,B,0\r\n"
      "\r\n"
      "0,0,0,F,0\r\n"
      "1,0,1,F,0\r\n");
  CHECK(s.name == "custom");
  CHECK(s.num_workers == 2);
  CHECK(s.num_stages == 2);
  CHECK(s.num_microbatches == 1);
  CHECK(s.stage_worker == std::vector<int>{0, 1});
  CHECK(same(s, [] {
    Schedule g = gpipe(2, 1);
    g.name = "custom";
    return g;
  }()));
}

TEST_CASE("CSV parse errors name the line") {
  const std::string header = "worker,index,stage,kind,microbatch\n";
  CHECK(error_of("worker,stage\n0,0\n") ==
        "from_csv: line 1: expected the header 'worker,index,stage,kind,microbatch', got 'worker,stage'");
  CHECK(error_of(header + "0,0,0,F,0\n0,1,0,B\n") ==
        "from_csv: line 3: expected 5 fields (worker,index,stage,kind,microbatch), got 4: '0,1,0,B'");
  CHECK(error_of(header + "0,0,x,F,0\n") == "from_csv: line 2: stage 'x' is not an integer");
  CHECK(error_of(header + "0,0,0,F,1.5\n") == "from_csv: line 2: microbatch '1.5' is not an integer");
  CHECK(error_of(header + "0,0,0,F,-1\n") == "from_csv: line 2: microbatch -1 is negative");
  CHECK(error_of(header + "0,0,0,X,0\n") == "from_csv: line 2: kind 'X' is not one of F, R, B, I, W");
  CHECK(error_of(header + "0,0,0,F,0\n0,0,0,B,0\n") ==
        "from_csv: line 3: worker 0 has index 0 twice (first on line 2)");
  CHECK(error_of(header + "0,0,0,F,0\n0,2,0,B,0\n") ==
        "from_csv: worker 0 has no action with index 1 (next is 2 on line 3)");
  CHECK(error_of("# schedule name=x colour=red\n" + header) ==
        "from_csv: line 1: unknown metadata key 'colour' (valid: name, workers, stages, microbatches, stage_worker)");
  CHECK(error_of("0,0,0,F,0\n") == "from_csv: line 1: expected the header 'worker,index,stage,kind,microbatch', got '0,0,0,F,0'");
  CHECK(error_of("") == "from_csv: no header line 'worker,index,stage,kind,microbatch'");
}

TEST_CASE("from_csv validates what it parsed") {
  const std::string header = "worker,index,stage,kind,microbatch\n";
  CHECK(error_of(header + "0,0,0,B,0\n0,1,0,F,0\n") ==
        "invalid schedule 'custom': deadlock: worker 0 waits at B0@0 for F0@0");
  CHECK_THAT(error_of(header + "0,0,0,F,0\n"), Catch::Contains("has no backward"));
  CHECK_THAT(error_of("# schedule workers=1\n" + header + "1,0,0,F,0\n"),
             Catch::Contains("worker 1 but the metadata says workers=1"));
}

// Found by //fuzz:schedule_csv_fuzzer (fuzz/regressions/schedule_csv/oom_huge_microbatch.csv):
// a micro-batch index of 155555555 made the count 155555556 and validate() allocated tables
// of that size (2 GB, then out of memory). Counts beyond what the rows can fill are refused.
TEST_CASE("from_csv refuses counts the rows cannot fill, before allocating anything") {
  const std::string huge = "worker,index,stage,kind,microbatch\n0,0,0,F,155555555\n0,1,0,B,0\n";
  REQUIRE_THROWS_WITH(pipewright::pipeline::from_csv(huge),
                      "from_csv: workers=1, stages=1, microbatches=155555556 need at least "
                      "155555556 action rows (one F per stage and micro-batch), the file has 2");
  const std::string meta =
      "# schedule workers=2000000000 stages=1 microbatches=1\n"
      "worker,index,stage,kind,microbatch\n0,0,0,F,0\n0,1,0,B,0\n";
  REQUIRE_THROWS_WITH(pipewright::pipeline::from_csv(meta),
                      Catch::Contains("workers=2000000000") && Catch::Contains("the file has 2"));
}

// The same guard in torch's format: a huge stage or micro-batch index is refused before
// validate() sizes anything by it.
TEST_CASE("from_torch_csv refuses counts the cells cannot fill, before allocating anything") {
  REQUIRE_THROWS_WITH(from_torch_csv("0F155555555,0B0\n"),
                      "from_torch_csv: stages=1, microbatches=155555556 need at least 155555556 "
                      "actions (one F per stage and micro-batch), the file has 2");
  REQUIRE_THROWS_WITH(from_torch_csv("1999999999F0\n"), Catch::Contains("stages=2000000000"));
}

// ---- torch.distributed.pipelining's CSV ----

TEST_CASE("torch CSV: a schedule written for torch runs here unchanged") {
  // torch's _dump_csv of ScheduleZBVZeroBubble(p = 2, m = 4): rank 1 starts with an idle slot.
  const std::string torch_zbv =
      "0F0,0F1,0F2,3F0,3I0,3W0,3F1,3I1,3W1,0F3,0I0,0W0,3F2,3I2,3W2,0I1,0W1,3F3,3I3,3W3,0I2,0W2,"
      "0I3,0W3\n"
      ",1F0,2F0,1F1,2F1,2I0,2W0,1F2,1I0,1W0,2F2,2I1,2W1,1F3,1I1,1W1,2F3,2I2,2W2,1I2,2I3,1I3,1W2,"
      "2W3,1W3\n";
  const Schedule s = from_torch_csv(torch_zbv, "zb-v");
  CHECK(same(s, zb_v(2, 4)));
  CHECK(s.stage_worker == v_placement(2));
  // Written back, the idle slot is gone and the rest is identical.
  CHECK(to_torch_csv(s) == torch_zbv.substr(0, torch_zbv.find('\n') + 1) +
                               torch_zbv.substr(torch_zbv.find('\n') + 2));
  for (const std::string& name : schedule_names()) {
    const bool interleaved = name == "interleaved-1f1b" || name == "interleaved-zb" ||
                         name == "looped-bfs" || name == "zb-v" || name == "dualpipev";
    const Schedule g = make_schedule(name, 2, 4, interleaved ? 2 : 1);
    INFO(name);
    CHECK(same(from_torch_csv(to_torch_csv(g), name), g));
  }
}

TEST_CASE("torch CSV: overlapped pairs and communication actions") {
  // torch's ScheduleDualPipeV(p = 2, m = 4) spells its pairs as OVERLAP_F_B; compute_comms
  // rows add SEND/RECV actions, which the transport does by itself.
  const std::string dualpipe =
      "0F0,0F1,0F2,3F0,3I0,3W0,3F1,(0F3;3B1)OVERLAP_F_B,(3F2;0B0)OVERLAP_F_B,3B2,"
      "(3F3;0B1)OVERLAP_F_B,3B3,0I2,0W2,0I3,0W3\n"
      "1RECV_F0,1F0,2F0,1F1,2F1,1F2,2B0,(2F2;1B0)OVERLAP_F_B,1SEND_B0,(1F3;2B1)OVERLAP_F_B,"
      "(2F3;1B1)OVERLAP_F_B,2B2,1B2,2I3,1I3,2W3,1W3,1REDUCE_GRAD\n";
  CHECK(same(from_torch_csv(dualpipe, "dualpipev"), dualpipev(2, 4)));
}

TEST_CASE("torch CSV: errors name the row, column and text") {
  CHECK_THROWS_WITH(from_torch_csv("0F0,0X1\n1F0\n"),
                    "from_torch_csv: row 0, column 1 ('0X1'): the type after the stage must be "
                    "F, I, W, B or a communication action");
  CHECK_THROWS_WITH(from_torch_csv("F0\n"),
                    "from_torch_csv: row 0, column 0 ('F0'): an action starts with its stage index");
  CHECK_THROWS_WITH(from_torch_csv("0F\n"),
                    Catch::Contains("a compute action ends with its micro-batch index"));
  CHECK_THROWS_WITH(from_torch_csv("0F0,1F0\n1F0\n"),
                    Catch::Contains("stage 1 is also on row 0 (a stage belongs to one rank)"));
  CHECK_THROWS_WITH(from_torch_csv("0F0,0B0\n2F0,2B0\n"),
                    "from_torch_csv: stage 1 appears on no row (stages are 0..2)");
  CHECK_THROWS_WITH(from_torch_csv("0F0,0B0\n1B0,1F0\n"), Catch::Contains("F0@1"));  // validate
  CHECK_THROWS_WITH(to_torch_csv(with_recompute(gpipe(2, 2),
                                                checkpoint_predicate(Checkpoint::kAlways, 2))),
                    Catch::Contains("torch's format has no recompute"));
}
