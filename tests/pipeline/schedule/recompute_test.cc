// with_recompute, checkpoint_predicate and the Checkpoint modes.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "pipeline/schedule/checkpoint_mode.h"
#include "pipeline/schedule/validate.h"
#include "pipeline/schedule/generators.h"

using namespace pipewright::pipeline;

namespace {
std::string str(const std::vector<Action>& list) {
  std::string out;
  for (const Action& a : list) {
    if (!out.empty()) out += ' ';
    out += a.str();
  }
  return out;
}
}  // namespace

TEST_CASE("Checkpoint modes parse, print and pick micro-batches like torchgpipe") {
  CHECK(parse_checkpoint("always") == Checkpoint::kAlways);
  CHECK(parse_checkpoint("except_last") == Checkpoint::kExceptLast);
  CHECK(parse_checkpoint("never") == Checkpoint::kNever);
  for (Checkpoint c : {Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever}) {
    CHECK(parse_checkpoint(to_string(c)) == c);
  }
  CHECK_THROWS_WITH(parse_checkpoint("sometimes"),
                    Catch::Contains("'sometimes'") && Catch::Contains("'always'") &&
                        Catch::Contains("'except_last'") && Catch::Contains("'never'"));
  CHECK_THROWS_AS(parse_checkpoint("Always"), std::invalid_argument);

  CHECK(is_checkpointed(Checkpoint::kAlways, 3, 4));
  CHECK(is_checkpointed(Checkpoint::kExceptLast, 2, 4));
  CHECK_FALSE(is_checkpointed(Checkpoint::kExceptLast, 3, 4));
  CHECK_FALSE(is_checkpointed(Checkpoint::kNever, 0, 4));
  CHECK_FALSE(is_checkpointed(Checkpoint::kExceptLast, 0, 1));  // one micro-batch: none
}

TEST_CASE("with_recompute inserts R right before each checkpointed B") {
  const Schedule g = with_recompute(gpipe(2, 3), checkpoint_predicate(Checkpoint::kExceptLast, 3));
  CHECK(str(g.actions[0]) == "F0@0 F1@0 F2@0 B2@0 R1@0 B1@0 R0@0 B0@0");
  CHECK(str(g.actions[1]) == "F0@1 F1@1 F2@1 B2@1 R1@1 B1@1 R0@1 B0@1");
  CHECK_NOTHROW(validate(g));

  const Schedule all = with_recompute(one_f_one_b(2, 2), checkpoint_predicate(Checkpoint::kAlways, 2));
  CHECK(str(all.actions[0]) == "F0@0 F1@0 R0@0 B0@0 R1@0 B1@0");
  CHECK(str(all.actions[1]) == "F0@1 R0@1 B0@1 F1@1 R1@1 B1@1");

  const Schedule none = with_recompute(gpipe(2, 3), checkpoint_predicate(Checkpoint::kNever, 3));
  CHECK(str(none.actions[0]) == str(gpipe(2, 3).actions[0]));
}

TEST_CASE("with_recompute puts R before I (never before W) in split schedules") {
  const Schedule z = with_recompute(zb_h1(2, 2), [](int stage, int mb) { return stage == 0 && mb == 1; });
  CHECK(str(z.actions[0]) == "F0@0 F1@0 I0@0 W0@0 R1@0 I1@0 W1@0");
  CHECK(str(z.actions[1]) == str(zb_h1(2, 2).actions[1]));
  CHECK_NOTHROW(validate(z));
}

TEST_CASE("with_recompute refuses a schedule that already recomputes the cell") {
  const Schedule once = with_recompute(gpipe(2, 2), checkpoint_predicate(Checkpoint::kAlways, 2));
  CHECK_THROWS_WITH(with_recompute(once, checkpoint_predicate(Checkpoint::kAlways, 2)),
                    Catch::Contains("already has R"));
  CHECK_THROWS_AS(checkpoint_predicate(Checkpoint::kAlways, 0), std::invalid_argument);
}
