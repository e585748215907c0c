// validate: hand-made bad schedules, each rejected with a message that says what is wrong.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "pipeline/schedule/deps.h"
#include "pipeline/schedule/validate.h"
#include "pipeline/schedule/generators.h"

using namespace pipewright::pipeline;

namespace {

constexpr auto F = ActionKind::kForward;
constexpr auto R = ActionKind::kRecompute;
constexpr auto B = ActionKind::kBackward;
constexpr auto I = ActionKind::kBackwardInput;
constexpr auto W = ActionKind::kBackwardWeight;

// A custom schedule with p workers, one stage each, m micro-batches and the given lists.
Schedule custom(int p, int m, std::vector<std::vector<Action>> lists) {
  Schedule s;
  s.name = "custom";
  s.num_workers = p;
  s.num_stages = p;
  s.num_microbatches = m;
  for (int i = 0; i < p; ++i) s.stage_worker.push_back(i);
  s.actions = std::move(lists);
  return s;
}

std::string error_of(const Schedule& s) {
  try {
    validate(s);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("validate accepts a minimal hand-written schedule") {
  CHECK_NOTHROW(validate(custom(2, 1, {{{0, F, 0}, {0, B, 0}}, {{1, F, 0}, {1, B, 0}}})));
  // Split backward and a recompute.
  CHECK_NOTHROW(validate(custom(1, 1, {{{0, F, 0}, {0, R, 0}, {0, I, 0}, {0, W, 0}}})));
}

TEST_CASE("validate reports a deadlock: each stuck worker, where it waits, for what") {
  // Worker 0 wants B1 before the gradient of micro-batch 1 can exist: worker 1 needs F2@0
  // first, which worker 0 only runs after its B1.
  Schedule s = custom(2, 3,
                      {
                          {{0, F, 0}, {0, F, 1}, {0, B, 1}, {0, F, 2}, {0, B, 0}, {0, B, 2}},
                          {{1, F, 0}, {1, F, 2}, {1, F, 1}, {1, B, 1}, {1, B, 0}, {1, B, 2}},
                      });
  CHECK(error_of(s) == "invalid schedule 'custom': deadlock: worker 0 waits at B1@0 for B1@1; "
                       "worker 1 waits at F2@1 for F2@0");
}

TEST_CASE("validate: a backward before its own forward on one worker") {
  const std::string e = error_of(custom(1, 1, {{{0, B, 0}, {0, F, 0}}}));
  CHECK(e == "invalid schedule 'custom': deadlock: worker 0 waits at B0@0 for F0@0");
}

TEST_CASE("validate: two workers each waiting for the other's backward order") {
  // Worker 1 takes micro-batch 1 before 0; worker 0 runs F1 only after B0, whose gradient
  // worker 1 produces only after F1: a cycle through both workers.
  Schedule s = custom(2, 2,
                      {
                          {{0, F, 0}, {0, B, 0}, {0, F, 1}, {0, B, 1}},
                          {{1, F, 1}, {1, F, 0}, {1, B, 0}, {1, B, 1}},
                      });
  CHECK(error_of(s) ==
        "invalid schedule 'custom': deadlock: worker 0 waits at B0@0 for B0@1; worker 1 waits at F1@1 for F1@0");
}

TEST_CASE("validate: missing and duplicated actions") {
  CHECK_THAT(error_of(custom(1, 2, {{{0, F, 0}, {0, B, 0}, {0, B, 1}}})), Catch::Contains("F1@0 is missing"));
  CHECK_THAT(error_of(custom(1, 1, {{{0, F, 0}, {0, F, 0}, {0, B, 0}}})),
             Catch::Contains("F0@0 appears 2 times"));
  CHECK_THAT(error_of(custom(1, 1, {{{0, F, 0}}})),
             Catch::Contains("cell (stage 0, micro-batch 0) has no backward"));
  CHECK_THAT(error_of(custom(1, 1, {{{0, F, 0}, {0, B, 0}, {0, B, 0}}})), Catch::Contains("B0@0 appears 2 times"));
}

TEST_CASE("validate: B and I/W are exclusive; I and W come in pairs") {
  CHECK_THAT(error_of(custom(1, 1, {{{0, F, 0}, {0, B, 0}, {0, W, 0}}})),
             Catch::Contains("has both B and I/W"));
  CHECK_THAT(error_of(custom(1, 1, {{{0, F, 0}, {0, I, 0}}})), Catch::Contains("W0@0 is missing"));
  CHECK_THAT(error_of(custom(1, 1, {{{0, F, 0}, {0, W, 0}}})), Catch::Contains("I0@0 is missing"));
  CHECK_THAT(error_of(custom(1, 1, {{{0, F, 0}, {0, I, 0}, {0, W, 0}, {0, W, 0}}})),
             Catch::Contains("W0@0 appears 2 times"));
}

TEST_CASE("validate: a W before its I deadlocks") {
  CHECK(error_of(custom(1, 1, {{{0, F, 0}, {0, W, 0}, {0, I, 0}}})) ==
        "invalid schedule 'custom': deadlock: worker 0 waits at W0@0 for I0@0");
}

TEST_CASE("validate: recompute at most once, and before its backward") {
  CHECK_THAT(error_of(custom(1, 1, {{{0, F, 0}, {0, R, 0}, {0, R, 0}, {0, B, 0}}})),
             Catch::Contains("R0@0 appears 2 times"));
  CHECK_THAT(error_of(custom(1, 1, {{{0, F, 0}, {0, B, 0}, {0, R, 0}}})),
             Catch::Contains("R0@0 comes after B0@0"));
  CHECK_THAT(error_of(custom(1, 1, {{{0, F, 0}, {0, I, 0}, {0, R, 0}, {0, W, 0}}})),
             Catch::Contains("R0@0 comes after I0@0"));
  // A recompute before its forward is a deadlock on the worker.
  CHECK(error_of(custom(1, 1, {{{0, R, 0}, {0, F, 0}, {0, B, 0}}})) ==
        "invalid schedule 'custom': deadlock: worker 0 waits at R0@0 for F0@0");
}

TEST_CASE("validate: actions on the wrong worker or out of range") {
  Schedule s = custom(2, 1, {{{0, F, 0}, {0, B, 0}, {1, F, 0}}, {{1, B, 0}}});
  CHECK_THAT(error_of(s), Catch::Contains("F0@1 is on worker 0 but stage 1 belongs to worker 1"));
  CHECK_THAT(error_of(custom(1, 1, {{{0, F, 0}, {0, B, 0}, {3, F, 0}}})),
             Catch::Contains("runs F0@3 but stages are 0..0"));
  CHECK_THAT(error_of(custom(1, 1, {{{0, F, 0}, {0, B, 0}, {0, F, 5}}})),
             Catch::Contains("runs F5@0 but micro-batches are 0..0"));
}

TEST_CASE("validate: inconsistent shape") {
  Schedule s = gpipe(2, 2);
  s.actions.pop_back();
  CHECK_THAT(error_of(s), Catch::Contains("actions has 1 worker lists but num_workers = 2"));

  s = gpipe(2, 2);
  s.stage_worker = {0};
  CHECK_THAT(error_of(s), Catch::Contains("stage_worker has 1 entries but num_stages = 2"));

  s = gpipe(2, 2);
  s.stage_worker = {0, 0};
  const std::string e = error_of(s);
  CHECK_THAT(e, Catch::Contains("worker 1 owns no stage"));

  s = gpipe(2, 2);
  s.stage_worker = {0, 7};
  CHECK_THAT(error_of(s), Catch::Contains("stage_worker[1] = 7 is not a worker"));

  s = gpipe(2, 2);
  s.num_microbatches = 0;
  CHECK_THAT(error_of(s), Catch::Contains("num_microbatches = 0 < 1"));
}

TEST_CASE("validate: interleaved stages must follow stage_worker") {
  Schedule s = interleaved_1f1b(2, 2, 2);
  CHECK_NOTHROW(validate(s));
  std::swap(s.stage_worker[2], s.stage_worker[3]);  // stage 2 now claims worker 1
  CHECK_THAT(error_of(s), Catch::Contains("is on worker 0 but stage 2 belongs to worker 1"));
}

TEST_CASE("validate: a generated schedule with two actions swapped across the pipeline") {
  // 1F1B, p = 2, m = 2: on the last stage, run B1 before F1 -> it waits for its own forward.
  Schedule s = one_f_one_b(2, 2);
  std::swap(s.actions[1][2], s.actions[1][3]);  // F0 B0 F1 B1 -> F0 B0 B1 F1
  CHECK(error_of(s) == "invalid schedule '1f1b': deadlock: worker 0 waits at B1@0 for B1@1; "
                       "worker 1 waits at B1@1 for F1@1");
}

// ---- skip connections' portals (Schedule::skips) ----

TEST_CASE("a skip edge adds its two messages to the dependencies") {
  Schedule s = gpipe(3, 2);
  s.skips = {{0, 2}};
  const ActionIndex index(s);
  const std::vector<Action> f = dependencies(index, s, {2, F, 1});
  REQUIRE(f == std::vector<Action>{{1, F, 1}, {0, F, 1}});
  const std::vector<Action> b = dependencies(index, s, {0, B, 1});
  REQUIRE(b == std::vector<Action>{{0, F, 1}, {1, B, 1}, {2, B, 1}});
  REQUIRE_NOTHROW(validate(s));
}

TEST_CASE("a skip edge must point forward between existing stages") {
  Schedule s = gpipe(3, 2);
  s.skips = {{2, 1}, {0, 3}};
  const std::string e = error_of(s);
  REQUIRE_THAT(e, Catch::Contains("skip edge 2 -> 1 needs 0 <= from < to <= 2"));
  REQUIRE_THAT(e, Catch::Contains("skip edge 0 -> 3 needs 0 <= from < to <= 2"));
}
