// The schedule explorer's JSON entry points (tools/explorer/explorer_api.h), natively: each
// answer against the library functions it must come from, or a closed form; and the Chrome
// trace reader (Trace::from_chrome_json, schedule, timeline) the page's trace view uses.
#include "tools/explorer/explorer_api.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "pipeline/schedule/generators.h"
#include "pipeline/schedule/io.h"
#include "pipeline/schedule/replay.h"
#include "pipeline/schedule/spec.h"
#include "pipeline/schedule/svg.h"
#include "pipeline/trace.h"

using namespace pipewright::pipeline;
using pipewright::explorer::explore_json;
using pipewright::explorer::schedules_json;
using pipewright::explorer::trace_json;
using Catch::Matchers::Contains;
using Catch::Matchers::WithinAbs;
using nlohmann::json;

namespace {

json explore(const json& request) { return json::parse(explore_json(request.dump())); }

}  // namespace

TEST_CASE("explorer: the registry's rows, in order, with their v limits") {
  const json rows = json::parse(schedules_json());
  const std::vector<ScheduleInfo> registry = registered_schedules();
  REQUIRE(rows.size() == registry.size());
  for (size_t i = 0; i < registry.size(); ++i) {
    CHECK(rows[i]["name"] == registry[i].name);
    CHECK(rows[i]["description"] == registry[i].description);
    CHECK(rows[i]["v_min"] == registry[i].virtual_stages.min);
    CHECK(rows[i]["v_max"] == registry[i].virtual_stages.max);
    CHECK(rows[i]["splits_backward"] == registry[i].splits_backward);
  }
}

TEST_CASE("explorer: 1F1B's answer is the closed form and the library's own pictures") {
  // tB = 2 tF: makespan (m + p - 1)(tF + tB), bubble (p - 1)/(m + p - 1); worker w holds p - w.
  const json r = explore({{"schedule", "1f1b"}, {"p", 4}, {"m", 8}});
  REQUIRE(r["ok"] == true);
  CHECK(r["replay"]["makespan"].get<double>() == 33.0);
  CHECK_THAT(r["replay"]["bubble"].get<double>(), WithinAbs(3.0 / 11.0, 1e-12));
  CHECK_THAT(r["theoretical_bubble"].get<double>(), WithinAbs(3.0 / 11.0, 1e-12));
  CHECK(r["memory"]["worker_activations"] == json({4, 3, 2, 1}));
  const Schedule s = make_schedule("1f1b", 4, 8);
  CHECK(r["svg"] == to_svg(s));
  CHECK(r["csv"] == to_csv(s));
  CHECK(r["torch_csv"] == to_torch_csv(s));
  CHECK(r["schedule"]["actions"][3][0] == json({{"stage", 3}, {"kind", "F"}, {"mb", 0}}));
  CHECK(r["replay"]["timeline"][3][1]["start"].get<double>() == 4.0);  // B0 on the last stage
}

TEST_CASE("explorer: costs, messages, v and recompute reach the replay as the library takes them") {
  const json r = explore({{"schedule", "interleaved-1f1b"}, {"p", 2}, {"m", 4}, {"v", 3},
                          {"recompute", "except_last"}, {"comm", 0.5},
                          {"costs", {{"F", 1.5}, {"B", 2.5}, {"I", 1.25}, {"W", 1.25}, {"R", 0.75}}}});
  REQUIRE(r["ok"] == true);
  ScheduleSpec spec{.name = "interleaved-1f1b", .virtual_stages = 3, .recompute = Checkpoint::kExceptLast};
  const Schedule s = build_schedule(spec, 2, 4);
  Costs costs = Costs::split(1.5, 1.25, 1.25);
  costs.uniform.recompute = 0.75;
  costs.comm_latency = 0.5;
  const ScheduleReplay want = replay_schedule(s, costs);
  CHECK(r["replay"]["makespan"].get<double>() == want.makespan);
  CHECK(r["replay"]["bubble"].get<double>() == want.bubble_fraction);
  CHECK(r["memory"]["stage_checkpointed_inputs"] == json(want.memory.stage_checkpointed_inputs));
  CHECK(r["schedule"]["v"] == 3);
  CHECK(r["torch_csv"].is_null());  // torch's format has no R
  CHECK(r["ascii"].is_null());      // a message of half a unit: no whole columns

  // Per-cell recompute is spec.h's RecomputeCells; per-stage costs replace the uniform ones.
  const json cells = explore({{"schedule", "1f1b"}, {"p", 2}, {"m", 3},
                              {"recompute", {{1, 1, 0}, {0, 0, 0}}},
                              {"per_stage", {{{"F", 2}}, {{"F", 3}, {"B", 1}}}}});
  REQUIRE(cells["ok"] == true);
  ScheduleSpec cell_spec{.name = "1f1b", .recompute = RecomputeCells{{{1, 1, 0}, {0, 0, 0}}}};
  Costs per_stage;
  per_stage.per_stage = {StageCosts{.forward = 2}, StageCosts{.forward = 3, .backward = 1}};
  const ScheduleReplay want_cells = replay_schedule(build_schedule(cell_spec, 2, 3), per_stage);
  CHECK(cells["replay"]["makespan"].get<double>() == want_cells.makespan);
  CHECK(cells["memory"]["stage_checkpointed_inputs"] == json({2, 0}));
}

TEST_CASE("explorer: every refusal is the library's message, never an exception") {
  const auto error = [](const std::string& request) {
    const json r = json::parse(explore_json(request));
    CHECK(r["ok"] == false);
    return r.value("error", std::string());
  };
  CHECK_THAT(error(R"({"schedule": "2f2b", "p": 2, "m": 4})"), Contains("2f2b"));
  CHECK_THAT(error(R"({"schedule": "interleaved-1f1b", "p": 4, "m": 8, "v": 1})"),
             Contains("v >= 2"));
  CHECK_THAT(error(R"({"schedule": "1f1b", "p": 2, "m": 4, "costs": {"F": -1}})"), Contains("negative"));
  CHECK_THAT(error(R"({"schedule": "1f1b", "p": "two"})"), Contains("\"p\" must be an integer"));
  CHECK_THAT(error(R"({"schedule": "1f1b", "recompute": "sometimes"})"), Contains("sometimes"));
  CHECK_THAT(error(R"({"csv": "0F0,0B1,0F1,0B0\n1F1,1B1,1F0,1B0\n"})"), Contains("deadlock"));
  CHECK_THAT(error("[1, 2]"), Contains("object"));
  CHECK_THAT(error("{not json"), Contains("not a JSON request"));
  CHECK_THAT(error("{}"), Contains("\"schedule\""));
}

TEST_CASE("explorer: a schedule read from either CSV is the one written") {
  const Schedule s = make_schedule("zb-v", 2, 4, 2);
  for (const std::string& text : {to_csv(s), to_torch_csv(s)}) {
    const json r = explore({{"csv", text}});
    REQUIRE(r["ok"] == true);
    CHECK(r["replay"]["makespan"].get<double>() == replay_schedule(s).makespan);
    CHECK(r["schedule"]["stage_worker"] == json(s.stage_worker));
  }
}

TEST_CASE("explorer: a schedule's name from a CSV is text in the picture, never markup") {
  Schedule s = make_schedule("1f1b", 2, 2);
  s.name = "<img/src=x/onerror=alert(1)>&co";  // a name is one word in the CSV
  const json r = explore({{"csv", to_csv(s)}});
  REQUIRE(r["ok"] == true);
  const std::string svg = r["svg"];
  CHECK(svg.find("<img") == std::string::npos);
  CHECK_THAT(svg, Contains("&lt;img/src=x/onerror=alert(1)&gt;&amp;co"));
}

TEST_CASE("Trace: a Chrome trace read back is the trace written, and its schedule the one run") {
  const Schedule s = make_schedule("zb-h1", 3, 5);
  const Costs costs = Costs::split(1.0, 1.5, 0.5);
  const Trace written = Trace::replayed(s, costs, 250.0);
  const Trace read = Trace::from_chrome_json(written.to_chrome_json());
  REQUIRE(read.events().size() == written.events().size());
  for (size_t i = 0; i < read.events().size(); ++i) {
    const TraceEvent& a = read.events()[i];
    const TraceEvent& b = written.events()[i];
    CHECK((a.worker == b.worker && a.stage == b.stage && a.kind == b.kind && a.microbatch == b.microbatch));
    CHECK(a.start_us == b.start_us);
    CHECK(a.end_us == b.end_us);
  }
  CHECK(read.num_workers() == 3);
  const Schedule back = read.schedule("zb-h1");
  CHECK(back.actions == s.actions);
  CHECK(back.stage_worker == s.stage_worker);

  // The timeline in milliseconds: the replay's, scaled by 250 us per unit.
  const ScheduleReplay timeline = read.timeline();
  const ScheduleReplay want = replay_schedule(s, costs);
  CHECK_THAT(timeline.makespan, WithinAbs(want.makespan * 0.25, 1e-12));
  CHECK_THAT(timeline.bubble_fraction, WithinAbs(want.bubble_fraction, 1e-12));
  CHECK(timeline.memory.worker_activations == want.memory.worker_activations);
  CHECK_THAT(to_svg(back, timeline, "ms"), Contains("ms, bubble"));
  CHECK(to_svg(s, costs) == to_svg(s, want));
  CHECK_THROWS_WITH(to_svg(make_schedule("1f1b", 2, 2), timeline), Contains("3 rows"));
}

TEST_CASE("Trace: a measured trace's messages and metadata are not actions") {
  Trace measured(2);
  measured.add(TraceEvent{.worker = 0, .stage = 0, .kind = ActionKind::kForward, .microbatch = 0,
                          .start_us = 10, .end_us = 20});
  measured.add(TraceEvent{.worker = 1, .stage = 1, .kind = ActionKind::kForward, .microbatch = 0,
                          .start_us = 25, .end_us = 30});
  measured.add(TraceEvent{.worker = 1, .stage = 1, .kind = ActionKind::kBackward, .microbatch = 0,
                          .start_us = 30, .end_us = 40});
  measured.add(TraceEvent{.worker = 0, .stage = 0, .kind = ActionKind::kBackward, .microbatch = 0,
                          .start_us = 45, .end_us = 60});
  measured.add(TraceTransfer{.worker = 0, .from_stage = 0, .to_stage = 1, .microbatch = 0, .gradient = false,
                             .skip = {}, .bytes = 64,
                             .start_us = 19, .end_us = 20});
  const Trace read = Trace::from_chrome_json(measured.to_chrome_json());
  CHECK(read.events().size() == 4);
  CHECK(read.transfers().empty());
  CHECK(read.schedule().actions == make_schedule("gpipe", 2, 1).actions);
  const ScheduleReplay timeline = read.timeline();
  CHECK(timeline.makespan == 0.05);  // 60 - 10 us, in ms
  CHECK(timeline.timeline[1][0].start == 0.015);
  CHECK(timeline.busy == std::vector<double>{0.025, 0.015});
  CHECK_THAT(timeline.bubble_fraction, WithinAbs(measured.bubble_fraction(), 1e-12));
}

TEST_CASE("Trace: from_chrome_json refuses what it cannot read, naming the event") {
  CHECK_THROWS_WITH(Trace::from_chrome_json("nope"), Contains("not JSON"));
  CHECK_THROWS_WITH(Trace::from_chrome_json("{}"), Contains("traceEvents"));
  CHECK_THROWS_WITH(Trace::from_chrome_json(R"({"traceEvents": [{"ph": "X", "cat": "forward", "pid": 0,
      "ts": 0, "dur": 1, "args": {"stage": 0}}]})"),
                    Contains("event 0"));
  CHECK_THROWS_WITH(Trace::from_chrome_json(R"({"traceEvents": [{"ph": "M"}, {"ph": "X", "cat": "lunch",
      "pid": 0, "ts": 0, "dur": 1, "args": {"stage": 0, "microbatch": 0}}]})"),
                    Contains("event 1"));
  CHECK_THROWS_WITH(Trace::from_chrome_json(R"({"traceEvents": []})").schedule(), Contains("no action"));
  // A stage on two workers is not a pipeline schedule.
  CHECK_THROWS_WITH(Trace::from_chrome_json(R"({"traceEvents": [
      {"ph": "X", "cat": "forward", "pid": 0, "ts": 0, "dur": 1, "args": {"stage": 0, "microbatch": 0}},
      {"ph": "X", "cat": "backward", "pid": 1, "ts": 1, "dur": 1, "args": {"stage": 0, "microbatch": 0}}]})")
                        .schedule(),
                    Contains("ran on workers 0 and 1"));
}

TEST_CASE("explorer: a trace's answer: measured bubble, the replay with its durations, mean costs") {
  const Schedule s = make_schedule("1f1b", 2, 4);
  const Trace trace = Trace::replayed(s, Costs::unit(1.0, 2.0), 1000.0);  // 1 ms per unit
  const json r = json::parse(trace_json(trace.to_chrome_json()));
  REQUIRE(r["ok"] == true);
  const ScheduleReplay want = replay_schedule(s, Costs::unit(1.0, 2.0));
  CHECK_THAT(r["measured"]["makespan"].get<double>(), WithinAbs(want.makespan, 1e-9));
  CHECK_THAT(r["measured"]["bubble"].get<double>(), WithinAbs(want.bubble_fraction, 1e-12));
  CHECK_THAT(r["replayed_bubble"].get<double>(), WithinAbs(want.bubble_fraction, 1e-12));
  CHECK(r["mean_costs"][1] == json({{"F", 1.0}, {"B", 2.0}, {"I", 0.0}, {"W", 0.0}, {"R", 0.0}}));
  CHECK(json::parse(trace_json("{\"traceEvents\": 3}"))["ok"] == false);
}
