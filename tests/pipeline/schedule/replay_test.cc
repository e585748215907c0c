// replay against the papers' formulas (GPipe, 1F1B, interleaving, zero bubble), plus a few
// hand-computed timelines. Cost convention: per action on one (virtual) stage; tF = tB gives
// the textbook pictures, tB = 2 tF the usual rule of thumb; both are checked.
#include <catch2/catch.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "pipeline/schedule/generators.h"
#include "pipeline/schedule/replay.h"

using namespace pipewright::pipeline;
using Catch::Detail::Approx;

namespace {

int max_of(const std::vector<int>& v) { return *std::max_element(v.begin(), v.end()); }

void check_equal_idle(const ScheduleReplay& sim, double expected) {
  for (size_t w = 0; w < sim.idle.size(); ++w) {
    INFO("worker " << w);
    CHECK(sim.idle[w] == Approx(expected));
  }
}

}  // namespace

TEST_CASE("gpipe and 1f1b: bubble (p-1)/(m+p-1), idle (p-1)(tF+tB) on every worker") {
  for (const char* name : {"gpipe", "1f1b"}) {
    for (double tb : {1.0, 2.0}) {
      for (int p = 2; p <= 4; ++p) {
        for (int m = 1; m <= 16; ++m) {
          INFO(name << " p=" << p << " m=" << m << " tF=1 tB=" << tb);
          const ScheduleReplay sim = replay_schedule(make_schedule(name, p, m), Costs::unit(1.0, tb));
          CHECK(sim.bubble_fraction == Approx(double(p - 1) / (m + p - 1)));
          CHECK(sim.makespan == Approx((m + p - 1) * (1.0 + tb)));
          check_equal_idle(sim, (p - 1) * (1.0 + tb));
        }
      }
    }
  }
}

TEST_CASE("peak activations: gpipe holds m on every stage, 1f1b min(p-s, m)") {
  for (int p = 2; p <= 4; ++p) {
    for (int m = 1; m <= 16; ++m) {
      INFO("p=" << p << " m=" << m);
      const MemoryPeaks g = replay_schedule(gpipe(p, m)).memory;
      const MemoryPeaks o = replay_schedule(one_f_one_b(p, m)).memory;
      for (int s = 0; s < p; ++s) {
        INFO("stage " << s);
        CHECK(g.stage_activations[s] == m);
        CHECK(o.stage_activations[s] == std::min(p - s, m));
        CHECK(o.stage_checkpointed_inputs[s] == 0);
        CHECK(o.worker_activations[s] == o.stage_activations[s]);  // one stage per worker
      }
    }
  }
}

TEST_CASE("interleaved 1f1b: idle (p-1)(tF+tB)/v with whole-stage costs tF, tB") {
  // A virtual stage is 1/v of a worker's model: each of its actions costs 1/v of a whole
  // stage's.
  for (int v = 1; v <= 3; ++v) {
    for (int p = 2; p <= 4; ++p) {
      for (int m = p; m <= 16; m += p) {
        INFO("p=" << p << " m=" << m << " v=" << v);
        const double tf = 1.0, tb = 2.0;
        const ScheduleReplay sim = replay_schedule(interleaved_1f1b(p, m, v), Costs::unit(tf / v, tb / v));
        check_equal_idle(sim, (p - 1) * (tf + tb) / v);
        CHECK(sim.bubble_fraction == Approx((p - 1.0) / (m * v + p - 1)));
      }
    }
  }
}

TEST_CASE("interleaved 1f1b: worker 0 holds p*v + p - 1 virtual-stage cells = A(p + (p-1)/v)") {
  for (int v = 1; v <= 3; ++v) {
    for (int p = 2; p <= 4; ++p) {
      for (int m = 2 * p; m <= 16; m += p) {  // m == p runs all forwards first: m*v cells
        INFO("p=" << p << " m=" << m << " v=" << v);
        const MemoryPeaks mem = replay_schedule(interleaved_1f1b(p, m, v)).memory;
        for (int w = 0; w < p; ++w) {
          CHECK(mem.worker_activations[w] == std::min(2 * (p - w - 1) + (v - 1) * p + 1, m * v));
        }
        CHECK(mem.worker_activations[0] / double(v) == Approx(p + (p - 1.0) / v));
      }
      const MemoryPeaks all_first = replay_schedule(interleaved_1f1b(p, p, v)).memory;
      CHECK(all_first.worker_activations[0] == p * v);
    }
  }
}

TEST_CASE("zb-h1: idle (p-1)(tF+tI-tW), a third of 1f1b's with equal costs; same peak") {
  for (int p = 2; p <= 4; ++p) {
    for (int m = 1; m <= 16; ++m) {
      INFO("p=" << p << " m=" << m);
      const ScheduleReplay zb = replay_schedule(zb_h1(p, m), Costs::split(1, 1, 1));
      const ScheduleReplay base = replay_schedule(one_f_one_b(p, m), Costs::split(1, 1, 1));  // tB = tI + tW
      CHECK(max_of(zb.memory.stage_activations) == max_of(base.memory.stage_activations));
      CHECK(max_of(zb.memory.stage_activations) == std::min(p, m));
      if (m >= p) {
        check_equal_idle(zb, (p - 1) * (1.0 + 1.0 - 1.0));
        CHECK(zb.bubble_fraction <= base.bubble_fraction / 2);
      } else {
        CHECK(zb.bubble_fraction <= base.bubble_fraction);
      }
    }
  }
  // Unequal costs: the formula holds while a W fits where an F would (tW <= tF).
  const std::vector<std::tuple<double, double, double>> costs = {{2, 2, 1}, {1, 2, 1}, {2, 1, 1}, {1, 1, 0.5}};
  for (const auto& [tf, ti, tw] : costs) {
    for (int p = 2; p <= 4; ++p) {
      INFO("tF=" << tf << " tI=" << ti << " tW=" << tw << " p=" << p);
      check_equal_idle(replay_schedule(zb_h1(p, 2 * p), Costs::split(tf, ti, tw)), (p - 1) * (tf + ti - tw));
    }
  }
}

TEST_CASE("zb-h2: with tF = tI = tW no gaps once m >= 2p-1; 2p-1 in flight") {
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 16; ++m) {
      INFO("p=" << p << " m=" << m);
      const ScheduleReplay sim = replay_schedule(zb_h2(p, m), Costs::split(1, 1, 1));
      const ScheduleReplay h1 = replay_schedule(zb_h1(p, m), Costs::split(1, 1, 1));
      CHECK(sim.makespan <= h1.makespan);
      if (m >= p) CHECK(sim.makespan == Approx(3.0 * m + p - 1));
      for (int w = 0; w < p; ++w) {
        INFO("worker " << w);
        CHECK(sim.memory.stage_activations[w] <= 2 * p - 1);
        if (m >= 2 * p - 1) {
          CHECK(sim.timeline[w].front().start == Approx(w));         // the diagonal start
          CHECK(sim.timeline[w].back().end == Approx(w + 3.0 * m));  // and end: a parallelogram
        }
      }
      CHECK(sim.memory.stage_activations[0] == std::min(2 * p - 1, m));
    }
  }
}

TEST_CASE("recompute: F keeps only the input, R restores the activations until B") {
  for (int m = 1; m <= 8; ++m) {
    INFO("m=" << m);
    const Schedule g = gpipe(3, m);
    const MemoryPeaks except_last =
        replay_schedule(with_recompute(g, checkpoint_predicate(Checkpoint::kExceptLast, m))).memory;
    const MemoryPeaks always = replay_schedule(with_recompute(g, checkpoint_predicate(Checkpoint::kAlways, m))).memory;
    for (int s = 0; s < 3; ++s) {
      // GPipe with recompute ~ m * a_in + A.
      CHECK(except_last.stage_activations[s] == 1);
      CHECK(except_last.stage_checkpointed_inputs[s] == m - 1);
      CHECK(always.stage_activations[s] == 1);
      CHECK(always.stage_checkpointed_inputs[s] == m);
    }
    const MemoryPeaks o =
        replay_schedule(with_recompute(one_f_one_b(3, m), checkpoint_predicate(Checkpoint::kAlways, m))).memory;
    for (int s = 0; s < 3; ++s) {
      CHECK(o.stage_activations[s] == 1);
      CHECK(o.stage_checkpointed_inputs[s] == std::min(3 - s, m));
    }
  }
}

TEST_CASE("recompute runs as soon as the worker is free, ahead of the gradient") {
  // gpipe(2, 1), always: worker 0 runs F0 R0 B0. R0@0 only needs F0@0, so it overlaps
  // worker 1's work; B0@0 waits for the gradient.
  const ScheduleReplay sim =
      replay_schedule(with_recompute(gpipe(2, 1), checkpoint_predicate(Checkpoint::kAlways, 1)), Costs::unit(1, 2));
  const auto& w0 = sim.timeline[0];
  const auto& w1 = sim.timeline[1];
  REQUIRE(w0.size() == 3);
  CHECK(w0[1].action.str() == "R0@0");
  CHECK(w0[1].start == 1.0);
  CHECK(w1[0].start == 1.0);  // F0@1
  CHECK(w1[1].start == 2.0);  // R0@1
  CHECK(w1[2].start == 3.0);  // B0@1
  CHECK(w0[2].start == 5.0);  // B0@0 after B0@1 ends
  CHECK(sim.makespan == 7.0);
}

TEST_CASE("communication latency is added to each dependency between workers") {
  Costs c = Costs::unit(1, 2);
  c.comm_latency = 0.5;
  const ScheduleReplay sim = replay_schedule(gpipe(2, 1), c);
  CHECK(sim.timeline[1][0].start == 1.5);  // F0@1 after F0@0 + latency
  CHECK(sim.timeline[1][1].start == 2.5);  // B0@1 right after its own F (same worker)
  CHECK(sim.timeline[0][1].start == 5.0);  // B0@0 after B0@1 (4.5) + latency
  CHECK(sim.makespan == 7.0);
  CHECK(sim.busy[0] == 3.0);
  CHECK(sim.idle[0] == 4.0);
  CHECK(sim.bubble_fraction == Approx(8.0 / 14.0));
}

TEST_CASE("per-stage (measured) costs") {
  // Stage 1 twice as slow as stage 0.
  Costs c;
  c.per_stage = {StageCosts{1, 2, 1, 1, 1}, StageCosts{2, 4, 2, 2, 2}};
  const ScheduleReplay sim = replay_schedule(gpipe(2, 2), c);
  // Worker 1: F0 [1,3] F1 [3,5] B1 [5,9] B0 [9,13]; worker 0: F0 F1 [0,2], B1 [9,11], B0 [13,15].
  CHECK(sim.timeline[1][3].end == 13.0);
  CHECK(sim.timeline[0][2].start == 9.0);
  CHECK(sim.timeline[0][3].start == 13.0);
  CHECK(sim.makespan == 15.0);
  CHECK(sim.busy == std::vector<double>{6.0, 12.0});
}

TEST_CASE("shared processors: two workers on one take turns, by hand") {
  // Note [Workers sharing processors]. GPipe, 2 workers, 2 micro-batches, tF = tB = 1.
  // Worker 0's F0 runs alone [0, 1]; then its F1 and worker 1's F0 share the processor at
  // half speed [1, 3]; worker 1's F1 and B1 run alone [3, 5]; worker 0's B1 and worker 1's
  // B0 share it [5, 7]; worker 0's B0 runs alone [7, 8].
  const ScheduleReplay sim = replay_on_shared_processors(gpipe(2, 2), Costs::unit(1, 1), 1, 1);
  CHECK(sim.timeline[0][1].start == Approx(1.0));
  CHECK(sim.timeline[0][1].end == Approx(3.0));
  CHECK(sim.timeline[1][0].end == Approx(3.0));
  CHECK(sim.timeline[1][2].end == Approx(5.0));
  CHECK(sim.timeline[1][3].start == Approx(5.0));
  CHECK(sim.timeline[1][3].end == Approx(7.0));
  CHECK(sim.timeline[0][3].start == Approx(7.0));
  CHECK(sim.makespan == Approx(8.0));
  CHECK(sim.busy[0] == Approx(6.0));  // wall time: a shared action is busy for longer
  CHECK(sim.busy[1] == Approx(6.0));
  CHECK(sim.bubble_fraction == Approx(0.25));
  // Two threads per worker on two processors share them the same way.
  const ScheduleReplay threads = replay_on_shared_processors(gpipe(2, 2), Costs::unit(1, 1), 2, 2);
  CHECK(threads.makespan == Approx(8.0));
}

TEST_CASE("shared processors: one runs all the work; enough of them, the plain replay") {
  for (const char* name : {"gpipe", "1f1b", "zb-h1", "zb-h2"}) {
    for (int p = 2; p <= 4; ++p) {
      for (int m = 1; m <= 8; ++m) {
        INFO(name << " p=" << p << " m=" << m);
        const Schedule s = make_schedule(name, p, m);
        const Costs costs = Costs::unit(1, 2);
        const ScheduleReplay plain = replay_schedule(s, costs);
        const double work = 3.0 * p * m;  // F + B, or F + I + W, per cell
        // One processor is never idle while some worker can run: the step is all the work.
        CHECK(replay_on_shared_processors(s, costs, 1, 1).makespan == Approx(work));
        // Between the critical path and all the work over the processors, plus the path.
        const double two = replay_on_shared_processors(s, costs, 2, 1).makespan;
        CHECK(two >= plain.makespan - 1e-9);
        CHECK(two >= work / 2 - 1e-9);
        CHECK(two <= plain.makespan + work / 2 + 1e-9);
        // A processor per worker: the plain replay.
        const ScheduleReplay own = replay_on_shared_processors(s, costs, p, 1);
        CHECK(own.makespan == plain.makespan);
        CHECK(own.busy == plain.busy);
      }
    }
  }
  // A chain (one micro-batch of GPipe) never has two workers running: nothing is shared.
  CHECK(replay_on_shared_processors(gpipe(3, 1), Costs::unit(1, 2), 1, 1).makespan ==
        Approx(replay_schedule(gpipe(3, 1), Costs::unit(1, 2)).makespan));
  CHECK_THROWS_WITH(replay_on_shared_processors(gpipe(2, 2), Costs{}, 0, 1),
                    Catch::Contains("processors 0 and threads 1 must be at least 1"));
}

TEST_CASE("simulate rejects bad costs and invalid schedules") {
  Costs negative = Costs::unit(1, -1);
  CHECK_THROWS_WITH(replay_schedule(gpipe(2, 2), negative), Catch::Contains("cost of B") && Catch::Contains("negative"));
  Costs wrong_size;
  wrong_size.per_stage = {StageCosts{}};
  CHECK_THROWS_WITH(replay_schedule(gpipe(2, 2), wrong_size),
                    Catch::Contains("per_stage has 1 entries") && Catch::Contains("2 stages"));
  Costs latency;
  latency.comm_latency = -1;
  CHECK_THROWS_AS(replay_schedule(gpipe(2, 2), latency), std::invalid_argument);
  Schedule broken = gpipe(2, 2);
  broken.actions[0].pop_back();
  CHECK_THROWS_WITH(replay_schedule(broken), Catch::Contains("no backward"));
}

TEST_CASE("wake-up cost: an action its worker waited for longer than wake_after starts later") {
  // Note [Waking an idle worker] (pipeline/planner/runtime_overhead.h). GPipe on 2 workers,
  // 2 micro-batches, tF = 1, tB = 2. Without the cost worker 1 runs F0 at 1, F1 at 2, B1 at 3,
  // B0 at 5; worker 0 waits from 2 to 5 for B1's gradient, then runs B1 5-7 and B0 7-9.
  Costs c = Costs::unit(1, 2);
  const ScheduleReplay plain = replay_schedule(gpipe(2, 2), c);
  REQUIRE(plain.makespan == 9.0);
  c.wake_latency = 0.25;
  c.wake_after = 1.5;  // worker 1's 1-unit wait for F0 is short; worker 0's 3-unit wait is not
  const ScheduleReplay woken = replay_schedule(gpipe(2, 2), c);
  const auto& w0 = woken.timeline[0];
  const auto& w1 = woken.timeline[1];
  CHECK(w1[0].start == 1.0);   // F0@1: waited 1 (< 1.5) for F0@0
  CHECK(w1[1].start == 2.0);   // F1@1
  CHECK(w0[2].start == 5.25);  // B1@0: waited 3 for B1@1 (ended 5), then the wake
  CHECK(w0[3].start == 7.25);  // B0@0 right after: no wait, no wake
  CHECK(woken.makespan == 9.25);
  // A wake_after at or above every wait costs nothing; a zero latency neither.
  c.wake_after = 3.0;
  CHECK(replay_schedule(gpipe(2, 2), c).makespan == 9.0);
  c.wake_after = 0;
  c.wake_latency = 0;
  CHECK(replay_schedule(gpipe(2, 2), c).makespan == 9.0);
  c.wake_latency = -1;
  CHECK_THROWS_WITH(replay_schedule(gpipe(2, 2), c), Catch::Contains("wake_latency is negative"));
  c.wake_latency = 0;
  c.wake_after = -1;
  CHECK_THROWS_WITH(replay_schedule(gpipe(2, 2), c), Catch::Contains("wake_after is negative"));
}
